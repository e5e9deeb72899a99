#!/bin/sh
# tools/ensure_venv.sh PYTHON VENV - the virtualenv `make` installs into (the Makefile's first step).
#
# PYTHON must be Python 3.11 or newer (pyproject.toml's requires-python). It is checked before anything
# is written, with one line saying what to do, so a wrong interpreter leaves no half-made VENV behind.
# A VENV whose own python is missing or older than 3.11 (made by an earlier try with python3.10) is
# made again with PYTHON: before, every later `make ... PYTHON=python3.11` reused it and failed with
# pip's "requires a different Python" until the user removed it by hand. A good VENV is left alone.
set -eu
python=$1
venv=$2
required=3.11

# "3.11" for an interpreter, or nothing when it does not run.
version_of() {
    "$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || true
}

# Whether version $1 ("3.10", "3.12") is at least $required.
new_enough() {
    major=${1%%.*} minor=${1#*.}
    minor=${minor%%.*}
    case "$major$minor" in '' | *[!0-9]*) return 1 ;; esac
    [ "$major" -gt 3 ] || { [ "$major" -eq 3 ] && [ "$minor" -ge 11 ]; }
}

found=$(version_of "$python")
if ! new_enough "$found"; then
    echo "make: Odradek needs Python $required or newer, but PYTHON=$python is ${found:+Python }${found:-not a working Python}: install one and run make again with PYTHON=python$required (or newer)" >&2
    exit 1
fi

if [ -e "$venv" ] || [ -L "$venv/bin/python" ]; then
    had=$(version_of "$venv/bin/python")
    if new_enough "$had"; then
        exit 0
    fi
    echo "make: $venv was made by ${had:+Python }${had:-a Python that no longer runs}; making it again with $python (Python $found)"
    exec "$python" -m venv --clear "$venv"
fi
exec "$python" -m venv "$venv"
