"""Build hook for the optional C extensions (everything else is in pyproject.toml):
protocol/_record_scan.c (the record framing pass) and protocol/_produce_codec.c (the Produce
request decoder and response encoder). ``optional=True``: without a compiler or Python headers the
build warns and the package installs without them; odradek.protocol.record_scan then uses its pure-Python
twin and odradek.protocol.codec its generated Python codec (same results)."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "odradek.protocol._record_scan",
            sources=["protocol/_record_scan.c"],
            optional=True,
        ),
        Extension(
            "odradek.protocol._produce_codec",
            sources=["protocol/_produce_codec.c"],
            optional=True,
        ),
    ]
)
