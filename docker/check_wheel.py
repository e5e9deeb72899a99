"""The image's build check: the odradek wheel in a directory carries both C extensions.

setup.py marks protocol/_record_scan.c and protocol/_produce_codec.c optional, so a build without a
compiler or Python headers still succeeds and the broker falls back to the pure-Python record check and
Produce codec (20-100x slower for those steps). The builder stage has a compiler; this makes sure the
wheel it hands the runtime stage really holds the compiled modules, and stops the build if not.

Usage: python docker/check_wheel.py WHEEL_DIR
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

EXTENSIONS = ("odradek/protocol/_record_scan", "odradek/protocol/_produce_codec")


def missing_extensions(wheel: Path) -> list[str]:
    names = zipfile.ZipFile(wheel).namelist()
    return [ext for ext in EXTENSIONS
            if not any(n.startswith(ext + ".") and n.endswith(".so") for n in names)]


def main(argv: list[str]) -> int:
    wheels = sorted(Path(argv[1]).glob("odradek-*.whl"))
    if len(wheels) != 1:
        print(f"check_wheel: expected one odradek wheel in {argv[1]}, found {[w.name for w in wheels]}",
              file=sys.stderr)
        return 1
    missing = missing_extensions(wheels[0])
    if missing:
        print(f"check_wheel: {wheels[0].name} lacks the compiled {', '.join(missing)} (was the C compiler "
              "missing? see the build output above)", file=sys.stderr)
        return 1
    print(f"check_wheel: {wheels[0].name} carries {', '.join(EXTENSIONS)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
