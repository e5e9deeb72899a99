"""Build hook for the one optional C extension, protocol/_record_scan.c (everything else is in
pyproject.toml). ``optional=True``: without a compiler or Python headers the build warns and the
package installs without it; protocol.record_scan then uses its pure-Python twin (same rules)."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "protocol._record_scan",
            sources=["protocol/_record_scan.c"],
            optional=True,
        )
    ]
)
