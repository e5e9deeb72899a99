"""``odradek [server.properties] [--override key=value ...]`` — start one broker, like kafka-server-start.

``odradek cluster [--brokers N] ...`` runs etcd plus N brokers locally instead (odradek.broker.launcher.cluster_launcher).

``odradek --processes N|auto [config]`` runs N broker processes on this host as one deployment under
one supervisor, with the metadata store it serves (odradek.broker.launcher.host_supervisor).

``odradek`` alone runs the built-in single-node configuration (odradek.broker.config.broker_config.SINGLE_NODE_DEFAULTS:
config/server.properties' settings, localhost:9092, data in ./data/kafka-logs).

Exit codes: 0 after a graceful shutdown (SIGTERM/SIGINT), 1 when the configuration is invalid
(the message names the key and the accepted values) or start-up fails (another process holds a
log dir's ``.lock``: the line names the dir and its PID; a listener cannot bind: Kafka's "Socket
server failed to bind to host:port", with the listener's name and the reason), and 1 when the broker
stopped itself (every log dir failed, or the metadata log dir did: Kafka's "Shutdown broker
because ...") or its shutdown could not save everything (a disk gone read-only). Each of those
ends with one ERROR line saying why, not a traceback; an unexpected exception still gets one.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from pathlib import Path

from odradek.broker.config.broker_config import BrokerConfig, ConfigError, load_config
from odradek.broker.network.allocator import tune_malloc

log = logging.getLogger("odradek")


def setup_logging(level: str, config_file: str | None = None) -> None:
    """Kafka's log4j layout on stderr at ``level``; or, with ``config_file``, the operator's own
    Python logging configuration (fileConfig for .ini/.conf, dictConfig for .json), the way Kafka
    takes a log4j.properties. Raises LogConfigError with one line on a bad or missing file."""
    if config_file:
        _load_log_config(config_file)
        return
    logging.basicConfig(
        stream=sys.stderr,
        level=getattr(logging, level.upper(), logging.INFO),
        format="[%(asctime)s] %(levelname)s %(message)s (%(name)s)",
    )


class LogConfigError(Exception):
    pass


def _load_log_config(path: str) -> None:
    import json
    import logging.config

    if not os.path.isfile(path):
        raise LogConfigError(f"log config file {path} does not exist")
    try:
        if path.endswith(".json"):
            with open(path, encoding="utf-8") as f:
                spec = json.load(f)
            spec.setdefault("disable_existing_loggers", False)
            logging.config.dictConfig(spec)
        else:
            # Loggers created at import (odradek.*) must keep logging under the new configuration.
            logging.config.fileConfig(path, disable_existing_loggers=False)
    except Exception as exc:  # configparser, json, KeyError, ValueError...: all a bad file
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise LogConfigError(f"invalid log config file {path}: {type(exc).__name__}: {reason}") from None


def warn_without_native_record_scan() -> None:
    """Say so when protocol/_record_scan.c was not built: every produced batch is then checked by
    the pure-Python pass, roughly 20-100x slower (docs/hardening.md), and a user should know why."""
    from odradek.protocol import record_scan

    if not record_scan.NATIVE:
        log.warning("The native record check (protocol/_record_scan.c) is not built: produced batches are "
                    "checked in pure Python, which is much slower. Install a C compiler and Python headers, "
                    "then reinstall (pip install .).")


def raise_open_files_limit() -> tuple[int, int]:
    """Raise the soft RLIMIT_NOFILE to the hard limit and log both; returns (soft, hard) after.

    Every partition costs about one descriptor for as long as the broker runs (each segment's
    .log, odradek.storage.segment), plus sockets. The JVM raises the soft limit to the hard one for Kafka
    at start-up (HotSpot's -XX:+MaxFDLimit, on by default); a Python process keeps the soft limit
    it inherits, often 1024, and ran out of descriptors with a few hundred partitions.
    """
    try:
        import resource
    except ImportError:  # not a POSIX system
        return -1, -1

    def text(value: int) -> str:
        return "unlimited" if value == resource.RLIM_INFINITY else str(value)

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard
    if target == resource.RLIM_INFINITY:
        # Linux caps the descriptor limit at fs.nr_open and refuses "unlimited".
        try:
            target = int(Path("/proc/sys/fs/nr_open").read_text())
        except (OSError, ValueError):
            target = soft
    raised = ""
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            raised = f" (raised from {text(soft)})"
        except (ValueError, OSError) as exc:
            log.warning("Could not raise the open files limit (RLIMIT_NOFILE) from %s to %s: %s",
                        text(soft), text(target), exc)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    log.info("Open files limit (RLIMIT_NOFILE): soft %s%s, hard %s; each partition needs about one",
             text(soft), raised, text(hard))
    return soft, hard


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    # `cluster` is dispatched in main() before argparse sees it (a positional subparser would take a
    # config file named like a subcommand), so the help names it by hand.
    parser = argparse.ArgumentParser(
        prog="odradek",
        usage="odradek [config] [--override key=value ...]\n       odradek cluster [--brokers N] ...",
        description="Odradek: a Kafka-compatible message broker.\n\n`odradek [config]` runs one broker: a "
                    "single node, or a member of a\ncluster when its config sets metadata.store=etcd://host:port.",
        epilog="subcommands:\n  cluster     etcd plus N brokers on this machine until Ctrl-C, to try a cluster\n"
               "              (odradek cluster --help)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("config", nargs="?",
                        help="server.properties file (Kafka's keys); without one (and without a node.id from "
                             "the environment or --override) the built-in single-node configuration, the "
                             "settings of config/server.properties, with data in ./data/kafka-logs")
    parser.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="key=value",
        help="override a property (repeatable), like kafka-server-start",
    )
    parser.add_argument("--processes", metavar="N|auto", default=None,
                        help="run N broker processes on this host as one deployment under one supervisor "
                             "(broker/launcher/host_supervisor.py; 'auto': one per usable core); sets odradek.processes")
    parser.add_argument("--log-level", default=os.environ.get("ODRADEK_LOG_LEVEL", "INFO"))
    parser.add_argument("--log-config", default=os.environ.get("ODRADEK_LOG_CONFIG") or None, metavar="FILE",
                        help="Python logging config: .ini/.conf (logging.config.fileConfig) or .json "
                             "(dictConfig); replaces --log-level. Example: config/logging.ini")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["cluster"]:  # a subcommand, not a file named "cluster": the daemon's arguments stay as they were
        from odradek.broker.launcher import cluster_launcher

        return cluster_launcher.main(argv[1:])
    args = parse_args(argv)
    try:
        setup_logging(args.log_level, args.log_config)
    except LogConfigError as exc:
        print(f"ERROR {exc}", file=sys.stderr)
        return 1
    overrides = list(args.override)
    if args.processes is not None:
        overrides.append(f"odradek.processes={args.processes}")
    try:
        config = load_config(args.config, overrides)
    except ConfigError as exc:
        log.error("Invalid configuration: %s", exc)
        return 1
    from odradek.broker.launcher import host_supervisor

    processes = host_supervisor.resolve_processes(config["odradek.processes"])
    if processes > 1:
        log_args = ["--log-level", args.log_level] + (["--log-config", args.log_config] if args.log_config else [])
        return host_supervisor.run(config, args.config, overrides, processes, log_args)
    raise_open_files_limit()
    tune_malloc()
    warn_without_native_record_scan()
    if config["odradek.event.loop"] == "uvloop":
        import uvloop

        runner = asyncio.Runner(loop_factory=uvloop.new_event_loop)
    else:
        runner = asyncio.Runner()
    with runner:
        return runner.run(_serve(config))


async def _serve(config: BrokerConfig) -> int:
    from odradek.broker.server import Broker
    from odradek.protocol.errors import KafkaApiError

    broker = Broker(config)
    stop = broker.stop_requested
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    from odradek.broker.cluster.errors import STARTUP_REFUSALS, StartAborted
    from odradek.storage.log_dir_lock import LogDirInUseError

    try:
        await broker.start()
    except LogDirInUseError as exc:
        # The first step of the start: nothing was opened, so there is nothing to shut down (and
        # no "shut down cleanly" line to confuse the one line that says why).
        log.error("Odradek failed to start: %s", exc)
        return 1
    except StartAborted as exc:
        log.info("Odradek did not start: %s", exc)
        await broker.shutdown()
        return 0
    except (OSError, KafkaApiError, *STARTUP_REFUSALS) as exc:  # type: ignore[misc]
        # A disk or storage fault at start-up (read-only or full disk, every log dir offline):
        # the message says it all.
        log.error("Odradek failed to start: %s", exc)
        await broker.shutdown()
        return 1
    except Exception:
        log.exception("Odradek failed to start")
        await broker.shutdown()
        return 1
    await stop.wait()
    if broker.fatal_reason is None:
        log.info("Shutting down (signal received)")
    clean = await broker.shutdown()
    return 0 if clean and broker.fatal_reason is None else 1


if __name__ == "__main__":
    sys.exit(main())
