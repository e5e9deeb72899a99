"""docker/Dockerfile's build without a container engine (none runs on the project's test machines).

Formats implemented, as far as this project's files use them:

* ``.dockerignore`` (Docker's rules, moby's patternmatcher): one pattern a line, ``#`` comments; a
  leading ``/`` and a trailing ``/`` are dropped; ``*`` and ``?`` match within one path component,
  ``**`` any number of components; a pattern that matches a directory matches everything under it;
  ``!`` brings a path back; the last matching line wins.
* The Dockerfile: ``\\`` continues a line; ``FROM image [AS name]`` starts a stage; ENV (``k=v``
  pairs), WORKDIR, COPY ``src... dest`` from the build context, RUN in shell or exec form with
  ``--mount=type=bind,from=STAGE,source=S,target=T``. Other instructions (USER, VOLUME, ...) change
  nothing a build step sees here.

``run_stage`` replays a stage's COPY and RUN steps in a directory standing for the image's file system
(``root``): each absolute path in a RUN command, in an ENV value or a COPY destination is taken under
``root``, and ``python``/``pip`` are a fresh virtual environment's (standing for the image's Python).
RUN steps that change the system's accounts or ownership (groupadd, useradd, chown) cannot run outside
a container: they are returned, not run, so a test can name them.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

# --- .dockerignore -------------------------------------------------------------------------------------


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    out = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            end = pattern.index("]", i)
            out.append("[" + pattern[i + 1:end].replace("!", "^", 1) + "]")
            i = end
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile("".join(out))


@dataclass(frozen=True)
class IgnoreRule:
    regex: re.Pattern[str]
    exception: bool  # a "!" line: brings the path back
    literal_prefix: str  # the pattern's text before its first wildcard


def load_dockerignore(path: Path) -> list[IgnoreRule]:
    rules = []
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        exception = line.startswith("!")
        pattern = os.path.normpath(line[1:].strip() if exception else line).lstrip("/")
        prefix = re.split(r"[*?\[]", pattern, maxsplit=1)[0]
        rules.append(IgnoreRule(_pattern_regex(pattern), exception, prefix))
    return rules


def is_excluded(rel: str, rules: list[IgnoreRule]) -> bool:
    """Whether ``rel`` (posix, relative to the context) is left out: the last rule matching it or one of
    its parent directories decides."""
    parts = rel.split("/")
    candidates = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
    excluded = False
    for rule in rules:
        if any(rule.regex.fullmatch(c) for c in candidates):
            excluded = not rule.exception
    return excluded


def build_context(root: Path, rules: list[IgnoreRule]) -> Iterator[str]:
    """The files Docker sends as the build context (posix paths relative to ``root``). An excluded
    directory is not walked unless an exception rule could bring back something inside it."""
    for dirpath, dirnames, filenames in os.walk(root):
        base = Path(dirpath).relative_to(root).as_posix()
        base = "" if base == "." else base + "/"
        keep = []
        for d in sorted(dirnames):
            rel = base + d
            if not is_excluded(rel, rules) or any(
                    r.exception and (r.literal_prefix.startswith(rel + "/") or r.literal_prefix == rel
                                     or not r.literal_prefix) for r in rules):
                keep.append(d)
        # A link to a directory (odradek/broker -> ../broker) goes as the link itself, as Docker sends it.
        for d in keep:
            if (Path(dirpath) / d).is_symlink() and not is_excluded(base + d, rules):
                yield base + d
        dirnames[:] = keep
        for f in sorted(filenames):
            if not is_excluded(base + f, rules):
                yield base + f


# --- the Dockerfile ------------------------------------------------------------------------------------


@dataclass
class Step:
    instruction: str  # upper case
    args: str  # the rest of the line, continuations joined


@dataclass
class Stage:
    image: str
    name: str
    steps: list[Step] = field(default_factory=list)


def parse_stages(dockerfile: Path) -> list[Stage]:
    text = re.sub(r"\\\n", " ", dockerfile.read_text())
    stages: list[Stage] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        instruction, _, args = line.partition(" ")
        instruction = instruction.upper()
        if instruction == "FROM":
            words = args.split()
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else str(len(stages))
            stages.append(Stage(words[0], name))
        else:
            stages[-1].steps.append(Step(instruction, args.strip()))
    return stages


def _flags(args: str) -> tuple[dict[str, str], str]:
    """Leading ``--name=value`` flags of an instruction and the rest of its arguments."""
    flags: dict[str, str] = {}
    rest = args
    while rest.startswith("--"):
        word, _, rest = rest.partition(" ")
        key, _, value = word[2:].partition("=")
        flags[key] = value
        rest = rest.lstrip()
    return flags, rest


_ABSOLUTE = re.compile(r"(?<![\w.:/-])/[\w./-]*")


@dataclass
class StageRun:
    """A stage replayed in ``root`` with the Python of ``venv``."""

    stage: Stage
    root: Path
    venv: Path
    env: dict[str, str] = field(default_factory=dict)  # the stage's ENV, paths taken under root
    image_env: dict[str, str] = field(default_factory=dict)  # the ENV as written
    workdir: str = "/"
    not_run: list[str] = field(default_factory=list)  # RUN commands that only a container can run
    output: str = ""

    def host(self, container_path: str) -> Path:
        return self.root / container_path.lstrip("/")

    def rewrite(self, text: str, mounts: Mapping[str, Path] | None = None) -> str:
        def sub(m: re.Match[str]) -> str:
            path = m.group(0)
            for target, source in (mounts or {}).items():
                if path == target or path.startswith(target.rstrip("/") + "/"):
                    return str(source) + path[len(target.rstrip("/")):]
            return str(self.host(path))

        return _ABSOLUTE.sub(sub, text)


# Commands a container build runs as root on its own system; outside one they would change the host's.
SYSTEM_COMMANDS = frozenset({"groupadd", "useradd", "chown", "mkdir"})


def _commands(shell: str) -> list[str]:
    return [part.split()[0] for part in re.split(r"&&|;|\|\|", shell) if part.split()]


def run_stage(stage: Stage, context: Path, context_files: set[str], root: Path, venv: Path,
              base_env: Mapping[str, str], built: Mapping[str, StageRun], timeout: float = 600,
              unset: frozenset[str] = frozenset()) -> StageRun:
    """Replay ``stage``; ``unset``: ENV keys of the image left out of the RUN steps' environment."""
    run = StageRun(stage, root, venv)
    root.mkdir(parents=True, exist_ok=True)
    for step in stage.steps:
        if step.instruction == "ENV":
            for part in shlex.split(step.args):
                key, _, value = part.partition("=")
                run.image_env[key] = value
                run.env[key] = run.rewrite(value)
        elif step.instruction == "WORKDIR":
            run.workdir = step.args if step.args.startswith("/") else f"{run.workdir.rstrip('/')}/{step.args}"
            run.host(run.workdir).mkdir(parents=True, exist_ok=True)
        elif step.instruction == "COPY":
            flags, rest = _flags(step.args)
            assert "from" not in flags, "COPY --from is not replayed here"
            *sources, dest = shlex.split(rest)
            dest_path = dest if dest.startswith("/") else f"{run.workdir.rstrip('/')}/{dest}"
            into_dir = dest.endswith("/") or dest in (".", "./") or len(sources) > 1
            for source in sources:
                src = source.strip("/")
                files = sorted(f for f in context_files if f == src or f.startswith(src + "/"))
                if not files:
                    raise FileNotFoundError(f"COPY {source}: not in the build context (.dockerignore?)")
                for f in files:
                    if f == src:  # a file
                        target = run.host(dest_path) / Path(f).name if into_dir else run.host(dest_path)
                    else:  # a directory: its contents go into dest
                        target = run.host(dest_path) / f[len(src) + 1:]
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(context / f, target, follow_symlinks=False)
        elif step.instruction == "RUN":
            flags, command = _flags(step.args)
            mounts: dict[str, Path] = {}
            if "mount" in flags:
                spec = dict(kv.split("=", 1) for kv in flags["mount"].split(","))
                assert spec.get("type") == "bind", spec
                mounts[spec["target"]] = built[spec["from"]].host(spec["source"])
            if command.startswith("["):
                raise AssertionError(f"exec-form RUN is not replayed here: {command}")
            if set(_commands(command)) <= SYSTEM_COMMANDS:
                run.not_run.append(command)
                continue
            env = {**base_env, **{k: v for k, v in run.env.items() if k not in unset},
                   "PATH": f"{venv / 'bin'}:{base_env.get('PATH', '/usr/bin:/bin')}", "VIRTUAL_ENV": str(venv)}
            started = time.monotonic()
            done = subprocess.run(["/bin/sh", "-c", run.rewrite(command, mounts)], cwd=run.host(run.workdir),
                                  env=env, capture_output=True, text=True, timeout=timeout)
            run.output += f"$ {command}\n{done.stdout}{done.stderr}({time.monotonic() - started:.1f} s)\n"
            if done.returncode != 0:
                raise AssertionError(f"RUN failed ({done.returncode}): {command}\n{run.output[-6000:]}")
    return run
