#!/usr/bin/env bash
# Builds the many-core bench's device bundle (issue 31, item 5): everything `bench/device/run.sh` needs
# to run `python -m bench.many_core` on a 16-core Linux x86-64 machine with no network and no Java,
# only Python 3.12 - in under 64 MiB.
#
#   bench/device/build_bundle.sh [BUNDLE_DIR]        (default .cache/device-bundle; it is replaced)
#   ODRADEK_COMMIT=<commit> bench/device/build_bundle.sh   the checkout to bundle (default HEAD)
#
# Needs here: JDK 17 (jlink, with jmods), Kafka 4.4.0's jars in .cache/jars/kafka (`make kafka-tools`),
# Python 3.12 with headers ($PYTHON312, else python3.12 on PATH, else pyenv's), network for `pip download`,
# git, xz, strip.
#
# What it writes (xz compresses class files and machine code far better than the deflate inside jars and
# wheels, so each part is stored uncompressed inside and xz'd whole):
#   jre.tar.xz       a jlink'd Java 17 runtime: the modules Kafka's broker and its tools use, no debug
#                    data, man pages or headers, libjvm.so stripped of its symbol table;
#   kafka.tar.xz     Kafka 4.4.0's jars the broker and kafka-producer/consumer-perf-test load (KAFKA_JARS
#                    below; Connect, Jetty, Jersey and OAuth's are left out), zstd-jni, snappy-java and
#                    lz4-java cut to their linux-x86_64 native library, every jar re-stored uncompressed;
#   wheels.tar.xz    CPython 3.12 manylinux x86-64 wheels of Odradek's runtime dependencies and
#                    confluent-kafka (the bench's clients), re-stored uncompressed;
#   odradek.tar.xz   this checkout's HEAD or $ODRADEK_COMMIT (git archive: broker, protocol, storage, controller, odradek,
#                    bench, tools, java's poms) with its two C extensions built for CPython 3.12;
#   run.sh           bench/device/run.sh;  MANIFEST  what went in, sizes, the commit.
# No etcd: `odradek --processes` serves its own metadata store (controller/embedded_etcd.py).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUNDLE=${1:-$REPO/.cache/device-bundle}
JARS=${KAFKA_JAR_DIR:-$REPO/.cache/jars/kafka}
LIMIT=$((64 * 1024 * 1024))

# The first that runs: a pyenv shim on PATH may name a version it will not run.
PY312=""
for candidate in ${PYTHON312:-} python3.12 "$HOME"/.pyenv/versions/3.12*/bin/python3.12; do
    if "$candidate" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; then
        PY312=$candidate
        break
    fi
done
[ -n "$PY312" ] || { echo "build_bundle: no Python 3.12 (set PYTHON312)" >&2; exit 1; }
[ -f "$JARS/kafka-clients-4.4.0.jar" ] \
    || { echo "build_bundle: Kafka 4.4.0's jars are not in $JARS (make kafka-tools)" >&2; exit 1; }
command -v jlink >/dev/null || { echo "build_bundle: jlink (JDK 17) is not on PATH" >&2; exit 1; }

# The broker (kafka.Kafka, KRaft combined mode, its storage format) and the perf tools, by trial: each left
# out is loaded by neither (Connect's REST server, Jetty, Jersey, OAuth, YAML configs, Scala's reflection);
# commons-validator is in for the broker's InetAddressValidator (its start fails without it).
KAFKA_JARS="kafka_2.13 kafka-clients kafka-server kafka-server-common kafka-metadata kafka-raft kafka-storage
kafka-storage-api kafka-group-coordinator kafka-group-coordinator-api kafka-coordinator-common
kafka-share-coordinator kafka-transaction-coordinator kafka-tools kafka-tools-api scala-library scala-logging_2.13
jackson-databind jackson-core jackson-annotations jackson-datatype-jdk8 jackson-dataformat-csv commons-validator log4j-api log4j-core
log4j-slf4j-impl slf4j-api zstd-jni lz4-java snappy-java metrics-core jopt-simple argparse4j re2j pcollections
caffeine HdrHistogram hash4j"
# What those jars use of the JDK (jdeps), plus java.desktop (log4j-core's LoggerContext uses java.beans:
# kafka-storage format failed without it), jdk.management (the OS MXBean Kafka's metrics read) and
# jdk.crypto.ec (TLS key exchange).
JAVA_MODULES=java.base,java.desktop,java.logging,java.management,jdk.management,jdk.unsupported,java.naming,java.rmi,java.scripting,java.security.jgss,java.security.sasl,java.sql,java.xml,jdk.crypto.ec
# pyproject.toml's runtime dependencies and the bench's client.
WHEELS="uvloop crc32c-rs crc32c lz4 zstandard cramjam prometheus-client aetcd google-re2 opentelemetry-proto confluent-kafka"

STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
say() { echo "[build_bundle] $*"; }
# Re-store a zip (jar, wheel) uncompressed; for a jar also drop the native libraries of other systems
# (zstd-jni's linux/amd64/, snappy-java's Linux/x86_64/ and lz4-java's linux/amd64/ are kept).
restore_zip() {
    "$PY312" - "$1" "$2" <<'EOF'
import os, re, sys, zipfile
kind, path = sys.argv[1], sys.argv[2]
ours = re.compile(r"linux[/-](amd64|x86_64)/", re.I)
with zipfile.ZipFile(path) as src:
    items = [(i, src.read(i)) for i in src.infolist()]
with zipfile.ZipFile(path + ".tmp", "w", zipfile.ZIP_STORED) as out:
    for info, data in items:
        name = info.filename
        if kind == "jar" and name.endswith((".so", ".dll", ".dylib", ".jnilib")) and not ours.search(name):
            continue  # another system's native library
        info.compress_type = zipfile.ZIP_STORED
        out.writestr(info, data)
os.replace(path + ".tmp", path)
EOF
}

say "JRE: jlink $JAVA_MODULES"
jlink --add-modules "$JAVA_MODULES" --strip-debug --no-man-pages --no-header-files --compress=0 --output "$STAGE/jre"
strip --strip-unneeded "$STAGE/jre/lib/server/libjvm.so"
rm -f "$STAGE/jre/lib/server/classes.jsa"  # a CDS archive, if jlink made one: only a start-up cache
mkdir -p "$STAGE/kafka/jars"
say "Kafka jars: $(echo $KAFKA_JARS | wc -w) of $(ls "$JARS" | wc -l)"
for name in $KAFKA_JARS; do
    jar=$(ls "$JARS/$name"-[0-9]*.jar 2>/dev/null | head -1)
    [ -n "$jar" ] || { echo "build_bundle: no $name jar in $JARS" >&2; exit 1; }
    cp "$jar" "$STAGE/kafka/jars/"
    restore_zip jar "$STAGE/kafka/jars/$(basename "$jar")"
done

say "wheels for CPython 3.12, manylinux x86-64: $WHEELS"
mkdir -p "$STAGE/wheels"
"$PY312" -m pip download --quiet --dest "$STAGE/wheels" --python-version 3.12 --implementation cp --abi cp312 \
    --only-binary=:all: --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux_2_28_x86_64 $WHEELS
for wheel in "$STAGE"/wheels/*.whl; do restore_zip wheel "$wheel"; done

COMMIT=$(git -C "$REPO" rev-parse "${ODRADEK_COMMIT:-HEAD}")
say "Odradek ${COMMIT:0:10} with its C extensions for CPython 3.12"
mkdir -p "$STAGE/odradek"
git -C "$REPO" archive "$COMMIT" broker protocol storage controller odradek bench tools java setup.py pyproject.toml \
    README.md | tar -x -C "$STAGE/odradek"
"$PY312" -m venv "$STAGE/build-venv"
"$STAGE/build-venv/bin/pip" install --quiet "setuptools>=77" wheel
(cd "$STAGE/odradek" && "$STAGE/build-venv/bin/python" setup.py -q build_ext --inplace >/dev/null)
ls "$STAGE"/odradek/protocol/_record_scan.cpython-312-*.so "$STAGE"/odradek/protocol/_produce_codec.cpython-312-*.so >/dev/null
rm -rf "$STAGE/odradek/build"

rm -rf "$BUNDLE"
mkdir -p "$BUNDLE"
for part in jre kafka wheels odradek; do
    say "compressing $part"
    tar -C "$STAGE" -cf - "$part" | xz -9e -T0 > "$BUNDLE/$part.tar.xz"
done
cp "$REPO/bench/device/run.sh" "$BUNDLE/run.sh"
chmod +x "$BUNDLE/run.sh"
{
    echo "odradek $COMMIT"
    echo "built $(date -u '+%Y-%m-%d %H:%M:%S UTC') on $(uname -m), $("$PY312" -V), $(java -version 2>&1 | head -1)"
    echo "java modules: $JAVA_MODULES"
    echo "kafka jars:"; ls -1 "$STAGE/kafka/jars" | sed 's/^/  /'
    echo "wheels:"; ls -1 "$STAGE/wheels" | sed 's/^/  /'
    echo "sizes (bytes):"; (cd "$BUNDLE" && ls -l *.tar.xz run.sh | awk '{print "  " $5 " " $9}')
} > "$BUNDLE/MANIFEST"
total=$(du -sb "$BUNDLE" | cut -f1)
say "bundle: $BUNDLE, $total bytes ($((total / 1024 / 1024)) MiB)"
if [ "$total" -ge "$LIMIT" ]; then
    echo "build_bundle: the bundle is $total bytes, over the 64 MiB limit" >&2
    exit 1
fi
