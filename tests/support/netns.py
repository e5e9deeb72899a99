"""docker/compose.yaml run without Docker: each service a process in a network namespace named after it.

There is no Docker engine on the test machines, so the compose file is exercised the way Docker would
run it, minus the images: ``ComposeNetns`` reads docker/compose.yaml (and, for services built from
docker/Dockerfile, the Dockerfile's ENV, ENTRYPOINT, CMD and single-file COPYs), then for every service

- creates a network namespace named ``<prefix><service>`` with a veth pair into a bridge in the root
  namespace, one address per service on a /24 (the bridge holds .1, so the test itself reaches every
  service from the root namespace);
- writes ``/etc/netns/<namespace>/hosts`` mapping every service name (and ``hostname``) to its address:
  ``ip netns exec`` bind-mounts it over /etc/hosts, so ``etcd`` and ``broker1`` resolve inside;
- runs the service's own command in its namespace: the image's ENTRYPOINT + (``command`` or CMD), with
  the image's ENV overlaid by the service's ``environment``. The broker's console script (``odradek``,
  from pyproject's [project.scripts]) runs from this checkout, so the KAFKA_* environment is translated
  by the broker's own code (odradek.broker.config.broker_config), as in the container; ``etcd``/``etcdctl`` are the binaries
  odradek.broker.launcher.etcd_binary finds; ``python`` is this interpreter. Volumes become directories under the work
  dir and files the Dockerfile COPYs come from the repository: their container paths are rewritten in
  arguments and environment values;
- starts services in ``depends_on`` order and waits for ``condition: service_healthy`` by running the
  service's own ``healthcheck`` in its namespace.

The network itself (bridge, namespaces, addresses, hosts files, partitions) is ``NamespaceNetwork``,
which tests/support/netns_cluster.py uses for the test cluster with each broker a host of its own.

``isolate(service)`` cuts a service off (its link down, or with ``from_services`` silent blackhole
routes between it and those services only, both ways); ``heal(service)`` undoes it. ``down()``
removes processes, namespaces, veths, the bridge and /etc/netns entries, also after a failure.
Published ``ports`` are not emulated: reach services at ``address(service)``.

Needs root and ``ip`` (iproute2); ``skip_reason()`` says why not.
"""

from __future__ import annotations

import json
import os
import random
import re
import shlex
import shutil
import subprocess
import sys
import time
import tomllib
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from odradek.broker.launcher.cluster_launcher import ManagedProcess
from odradek.broker.launcher.etcd_binary import find_etcd_binary

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "docker" / "compose.yaml"
ETCD_TOOLS = ("etcd", "etcdctl", "etcdutl")


def namespaces_skip_reason() -> str | None:
    """Why network namespaces cannot be made here, or None when they can."""
    if sys.platform != "linux":
        return "network namespaces need Linux"
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add)"
    if shutil.which("ip") is None:
        return "the ip command (iproute2) is missing"
    return None


def skip_reason() -> str | None:
    """Why the compose services cannot be run here, or None when they can."""
    why = namespaces_skip_reason()
    if why is not None:
        return why
    try:
        import yaml  # noqa: F401
    except ImportError:
        return "PyYAML is missing (pip install -e '.[test]')"
    return None


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done


# --- the network: one namespace per host on a bridge --------------------------------------------------

class NamespaceNetwork:
    """A namespace per host, each with a veth into one bridge in the root namespace and one address on a
    /24 (the bridge holds .1, so this process reaches every host from the root namespace), and
    ``/etc/netns/<namespace>/hosts`` naming every host (``ip netns exec`` bind-mounts it over /etc/hosts).

    ``isolate(host)`` takes its link down (nobody reaches it, the root namespace neither);
    ``isolate(host, from_hosts)`` adds silent blackhole routes between it and those hosts only, both
    ways (a partition: the root namespace, where the test's clients run, still reaches it).
    ``heal(host)`` undoes both; ``down()`` removes namespaces, veths, bridge and /etc/netns entries.
    """

    def __init__(self, hosts: Sequence[str], prefix: str = "", subnet: str | None = None,
                 aliases: Mapping[str, Sequence[str]] | None = None) -> None:
        self.hosts = list(hosts)
        self.prefix = prefix
        self.aliases = {h: list(a) for h, a in (aliases or {}).items()}
        tag = uuid.uuid4().hex[:5]
        self.bridge = f"odrbr{tag}"
        self.subnet = subnet or self._free_subnet()
        self.addresses = {name: f"{self.subnet}.{i + 2}" for i, name in enumerate(self.hosts)}
        self.host_veths = {name: f"odr{tag}{i}" for i, name in enumerate(self.hosts)}
        self._blackholes: dict[str, list[tuple[str, str]]] = {}  # host -> [(namespace, address)]
        self._made: list[str] = []  # namespaces created, for down()

    @staticmethod
    def _free_subnet() -> str:
        used = ip("-4", "-o", "addr", "show").stdout
        # From a random start: two test runs on one machine choosing at the same moment would
        # otherwise both take the first free subnet and reach each other's etcd and brokers.
        start = random.randrange(186)
        for i in range(186):
            third = 64 + (start + i) % 186
            candidate = f"10.213.{third}"
            if f" {candidate}." not in used:
                return candidate
        raise RuntimeError("no free 10.213.x.0/24 subnet")

    def namespace(self, host: str) -> str:
        return self.prefix + host

    def address(self, host: str) -> str:
        return self.addresses[host]

    def exec_prefix(self, host: str) -> list[str]:
        """The argv prefix that runs a command in ``host``'s namespace."""
        return ["ip", "netns", "exec", self.namespace(host)]

    def up(self) -> NamespaceNetwork:
        try:
            ip("link", "add", self.bridge, "type", "bridge")
            ip("addr", "add", f"{self.subnet}.1/24", "dev", self.bridge)
            ip("link", "set", self.bridge, "up")
            hosts = ["127.0.0.1 localhost", "::1 localhost ip6-localhost ip6-loopback"]
            for name in self.hosts:
                names = [name] + [a for a in self.aliases.get(name, []) if a != name]
                hosts.append(f"{self.addresses[name]} {' '.join(names)}")
            for name in self.hosts:
                ns = self.namespace(name)
                if ns in ip("netns", "list").stdout.split():
                    raise RuntimeError(f"network namespace {ns} exists already (a run left behind? "
                                       f"`ip netns del {ns}`)")
                ip("netns", "add", ns)
                self._made.append(ns)
                veth = self.host_veths[name]
                ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
                ip("link", "set", veth, "master", self.bridge, "up")
                ip("-n", ns, "addr", "add", f"{self.addresses[name]}/24", "dev", "eth0")
                ip("-n", ns, "link", "set", "eth0", "up")
                ip("-n", ns, "link", "set", "lo", "up")
                etc = Path("/etc/netns") / ns
                etc.mkdir(parents=True, exist_ok=True)
                (etc / "hosts").write_text("\n".join(hosts) + "\n")
        except BaseException:
            self.down()
            raise
        return self

    def isolate(self, host: str, from_hosts: Sequence[str] | None = None) -> None:
        """Cut ``host`` off: from everyone (its link down), or from ``from_hosts`` only (blackhole
        routes both ways: packets vanish silently, as in a partition). ``heal`` undoes it."""
        if from_hosts is None:
            ip("link", "set", self.host_veths[host], "down")
            return
        routes = self._blackholes.setdefault(host, [])
        for peer in from_hosts:
            for ns, target in ((self.namespace(host), self.addresses[peer]),
                               (self.namespace(peer), self.addresses[host])):
                ip("-n", ns, "route", "add", "blackhole", f"{target}/32")
                routes.append((ns, target))

    def heal(self, host: str) -> None:
        ip("link", "set", self.host_veths[host], "up")
        for ns, target in self._blackholes.pop(host, []):
            ip("-n", ns, "route", "del", "blackhole", f"{target}/32", check=False)

    def down(self) -> None:
        """Remove the namespaces (each takes its end of a veth, and so the pair, along), the veths
        left, the bridge and the /etc/netns entries; safe to call twice or after a failed ``up``."""
        for ns in self._made:
            ip("netns", "del", ns, check=False)
            shutil.rmtree(Path("/etc/netns") / ns, ignore_errors=True)
        self._made.clear()
        for veth in self.host_veths.values():
            if Path(f"/sys/class/net/{veth}").exists():
                ip("link", "del", veth, check=False)
        if Path(f"/sys/class/net/{self.bridge}").exists():
            ip("link", "del", self.bridge, check=False)


# --- the Dockerfile: what the image adds to a service -------------------------------------------------

@dataclass
class DockerImage:
    env: dict[str, str] = field(default_factory=dict)
    entrypoint: list[str] = field(default_factory=list)
    cmd: list[str] = field(default_factory=list)
    workdir: str = "/"
    copies: dict[str, Path] = field(default_factory=dict)  # container path -> repository file


def _exec_form(value: str) -> list[str]:
    value = value.strip()
    if value.startswith("["):
        return [str(v) for v in json.loads(value)]
    return ["/bin/sh", "-c", value]


def parse_dockerfile(path: Path, context: Path) -> DockerImage:
    """ENV, ENTRYPOINT, CMD, WORKDIR and single-file COPYs of the last stage (what a container starts with)."""
    text = re.sub(r"\\\n", " ", path.read_text())
    image = DockerImage()
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        instruction, _, rest = line.partition(" ")
        instruction = instruction.upper()
        if instruction == "FROM":
            image = DockerImage()
        elif instruction == "ENV":
            parts = shlex.split(rest)
            if parts and "=" not in parts[0]:  # legacy "ENV KEY value"
                image.env[parts[0]] = " ".join(parts[1:])
            else:
                for part in parts:
                    key, _, value = part.partition("=")
                    image.env[key] = value
        elif instruction == "ENTRYPOINT":
            image.entrypoint = _exec_form(rest)
            image.cmd = []  # Docker: a new ENTRYPOINT resets an inherited CMD
        elif instruction == "CMD":
            image.cmd = _exec_form(rest)
        elif instruction == "WORKDIR":
            image.workdir = rest.strip()
        elif instruction == "COPY":
            parts = [p for p in shlex.split(rest) if not p.startswith("--")]
            if len(parts) == 2 and (context / parts[0]).is_file() and not parts[1].endswith("/"):
                image.copies[parts[1]] = context / parts[0]
    return image


# --- the compose file --------------------------------------------------------------------------------

@dataclass
class ComposeService:
    name: str
    command: list[str]  # the full argv as the container would run it (entrypoint + command)
    environment: dict[str, str]
    volumes: dict[str, str]  # container path -> volume (or host path) name
    depends_on: dict[str, str]  # service -> condition
    healthcheck: list[str] | None
    health_interval: float
    health_retries: int
    hostname: str | None
    image: DockerImage | None


def _seconds(value: object, default: float) -> float:
    if value is None:
        return default
    text = str(value)
    total = 0.0
    for number, unit in re.findall(r"([\d.]+)(ms|s|m|h)", text):
        total += float(number) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[unit]
    return total or default


def _environment(value: object) -> dict[str, str]:
    if isinstance(value, Mapping):
        return {str(k): "" if v is None else str(v) for k, v in value.items()}
    out: dict[str, str] = {}
    for item in value or []:  # type: ignore[attr-defined]
        key, _, val = str(item).partition("=")
        out[key] = val
    return out


def load_compose(path: Path = COMPOSE_FILE) -> dict[str, ComposeService]:
    import yaml

    spec = yaml.safe_load(path.read_text())
    services: dict[str, ComposeService] = {}
    for name, svc in spec["services"].items():
        image = None
        if "build" in svc:
            build = svc["build"] if isinstance(svc["build"], Mapping) else {"context": svc["build"]}
            context = (path.parent / build.get("context", ".")).resolve()
            image = parse_dockerfile(context / build.get("dockerfile", "Dockerfile"), context)
        command = svc.get("command")
        command = shlex.split(command) if isinstance(command, str) else [str(c) for c in command or []]
        entrypoint = svc.get("entrypoint")
        if entrypoint is not None:
            argv = (shlex.split(entrypoint) if isinstance(entrypoint, str) else list(entrypoint)) + command
        elif image is not None:
            argv = image.entrypoint + (command or image.cmd)
        else:
            argv = command  # a pulled image: the command names its binary (compose.yaml's etcd does)
        if not argv:
            raise ValueError(f"service {name}: no command to run")
        volumes: dict[str, str] = {}
        for volume in svc.get("volumes", []):
            if isinstance(volume, Mapping):
                volumes[str(volume["target"])] = str(volume.get("source", volume["target"]))
            else:
                source, target = str(volume).split(":")[:2]
                volumes[target] = source
        depends = svc.get("depends_on", {})
        depends_on = ({d: "service_started" for d in depends} if isinstance(depends, list)
                      else {d: (c or {}).get("condition", "service_started") for d, c in depends.items()})
        health = svc.get("healthcheck") or {}
        test = health.get("test")
        if isinstance(test, str):
            test = ["CMD-SHELL", test]
        healthcheck: list[str] | None
        if not test or test[0] == "NONE" or health.get("disable"):
            healthcheck = None
        elif test[0] == "CMD":
            healthcheck = [str(t) for t in test[1:]]
        else:  # CMD-SHELL
            healthcheck = ["/bin/sh", "-c", " ".join(str(t) for t in test[1:])]
        env = dict(image.env) if image else {}
        env.update(_environment(svc.get("environment")))
        services[name] = ComposeService(
            name, [str(a) for a in argv], env, volumes, depends_on, healthcheck,
            _seconds(health.get("interval"), 1.0), int(health.get("retries", 30)),
            svc.get("hostname"), image)
    return services


def start_order(services: Mapping[str, ComposeService]) -> list[str]:
    """Every service after the ones it depends on (compose's order)."""
    order: list[str] = []

    def visit(name: str, path: tuple[str, ...]) -> None:
        if name in order:
            return
        if name in path:
            raise ValueError(f"depends_on cycle: {' -> '.join(path + (name,))}")
        for dep in services[name].depends_on:
            visit(dep, path + (name,))
        order.append(name)

    for name in services:
        visit(name, ())
    return order


def _console_scripts() -> dict[str, str]:
    with open(REPO / "pyproject.toml", "rb") as f:
        return dict(tomllib.load(f)["project"].get("scripts", {}))


def local_argv(argv: Sequence[str]) -> list[str]:
    """The container's argv with its program replaced by this machine's: the project's console
    scripts run from this checkout with this interpreter, etcd's tools from odradek.broker.launcher.etcd_binary."""
    program, args = os.path.basename(argv[0]), list(argv[1:])
    scripts = _console_scripts()
    if program in scripts:
        module, _, function = scripts[program].partition(":")
        return [sys.executable, "-c", f"import sys; from {module} import {function}; sys.exit({function}())", *args]
    if re.fullmatch(r"python[\d.]*", program):
        return [sys.executable, *args]
    if program in ETCD_TOOLS:
        binary, why = find_etcd_binary(program)
        if binary is None:
            raise RuntimeError(why)
        return [binary, *args]
    return [shutil.which(argv[0]) or argv[0], *args]


class ServiceProcess(ManagedProcess):
    """A compose service's command run with ``ip netns exec`` in its namespace."""

    def __init__(self, namespace: str, argv: list[str], env: dict[str, str], log_path: Path) -> None:
        super().__init__(namespace, log_path)
        self.namespace = namespace
        self.argv = argv
        self.env = env

    def command(self) -> list[str]:
        return ["ip", "netns", "exec", self.namespace, *self.argv]

    def environment(self) -> dict[str, str]:
        return self.env


class ComposeNetns:
    """docker/compose.yaml's services, each in a namespace of its own (see the module doc)."""

    def __init__(self, work_dir: Path, compose_file: Path = COMPOSE_FILE, prefix: str = "",
                 subnet: str | None = None) -> None:
        self.work_dir = Path(work_dir)
        self.services = load_compose(compose_file)
        self.network = NamespaceNetwork(
            list(self.services), prefix, subnet,
            aliases={n: [s.hostname] for n, s in self.services.items() if s.hostname})
        self.processes: dict[str, ServiceProcess] = {}

    def namespace(self, service: str) -> str:
        return self.network.namespace(service)

    def address(self, service: str) -> str:
        return self.network.address(service)

    def isolate(self, service: str, from_services: Sequence[str] | None = None) -> None:
        """Cut ``service`` off: from everyone (its link down), or from ``from_services`` only (blackhole
        routes both ways: packets vanish silently, as in a partition). ``heal`` undoes it."""
        self.network.isolate(service, from_services)

    def heal(self, service: str) -> None:
        self.network.heal(service)

    def exec(self, service: str, argv: Sequence[str], timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` (container-side, see ``local_argv``) in ``service``'s namespace, with its environment."""
        return subprocess.run(["ip", "netns", "exec", self.namespace(service), *self._translate(service, argv)],
                              env=self._env(service), capture_output=True, text=True, timeout=timeout)

    # --- services ------------------------------------------------------------------------------
    def _paths(self, service: str) -> list[tuple[str, str]]:
        """(container path, host path), longest first: volumes as work-dir directories, COPYed files."""
        svc = self.services[service]
        out = []
        for target, source in svc.volumes.items():
            host = self.work_dir / "volumes" / re.sub(r"[^\w.-]", "_", source)
            host.mkdir(parents=True, exist_ok=True)
            out.append((target, str(host)))
        if svc.image is not None:
            out += [(target, str(source)) for target, source in svc.image.copies.items()]
        return sorted(out, key=lambda p: -len(p[0]))

    def _rewrite(self, service: str, value: str) -> str:
        for container, host in self._paths(service):
            value = re.sub(rf"(?<![\w.-]){re.escape(container)}(?=$|[/,:;\s])", host, value)
        return value

    def _translate(self, service: str, argv: Sequence[str]) -> list[str]:
        return local_argv([self._rewrite(service, a) for a in argv])

    def _env(self, service: str) -> dict[str, str]:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.work_dir),
               "PYTHONPATH": str(REPO), "LANG": "C.UTF-8"}
        env.update({k: self._rewrite(service, v) for k, v in self.services[service].environment.items()})
        return env

    def healthy(self, service: str) -> bool:
        check = self.services[service].healthcheck
        if check is None:
            return self.processes[service].alive()
        try:
            return self.exec(service, check, timeout=10).returncode == 0
        except subprocess.TimeoutExpired:
            return False

    def wait_healthy(self, service: str, timeout: float = 60.0) -> None:
        proc = self.processes[service]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not proc.alive():
                raise RuntimeError(f"{service} exited with {proc.returncode()}:\n{proc.log_text(4000)}")
            if self.healthy(service):
                return
            time.sleep(min(self.services[service].health_interval, 0.5))
        raise RuntimeError(f"{service} not healthy within {timeout} s:\n{proc.log_text(4000)}")

    def start(self, service: str) -> ServiceProcess:
        svc = self.services[service]
        cwd = self.work_dir / "cwd" / service
        cwd.mkdir(parents=True, exist_ok=True)
        proc = ServiceProcess(self.namespace(service), self._translate(service, svc.command), self._env(service),
                              self.work_dir / "logs" / f"{service}.log")
        proc.spawn(cwd=cwd)
        self.processes[service] = proc
        return proc

    def up(self, timeout: float = 60.0) -> ComposeNetns:
        """Network, then every service in depends_on order, waiting where a dependant asks for health."""
        try:
            self.network.up()
            wanted_healthy = {dep for svc in self.services.values()
                              for dep, cond in svc.depends_on.items() if cond == "service_healthy"}
            for name in start_order(self.services):
                self.start(name)
                if name in wanted_healthy:
                    self.wait_healthy(name, timeout)
        except BaseException:
            self.down()
            raise
        return self

    def stop(self, service: str, timeout: float = 30.0) -> int | None:
        return self.processes[service].stop(timeout)

    def down(self) -> None:
        """Stop the services (dependants first), then remove namespaces, veths, bridge, /etc/netns."""
        for name in reversed(start_order(self.services)):
            proc = self.processes.get(name)
            if proc is not None:
                proc.stop(30)
        self.network.down()

    def logs(self) -> str:
        return "\n".join(f"===== {name} =====\n{p.log_text(6000)}" for name, p in self.processes.items())

    def __enter__(self) -> ComposeNetns:
        return self.up()

    def __exit__(self, *exc: object) -> None:
        self.down()
