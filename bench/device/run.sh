#!/usr/bin/env bash
# Runs the many-core bench (bench/many_core.py, issue 31 item 5) from the bundle build_bundle.sh made, on a
# Linux x86-64 machine with no network and no Java: Python 3.12 is all it needs.
#
#   bash .cache/device-bundle/run.sh [bench.many_core arguments...]
#
# Results go under $OUT (default ./device-results): many-core.json and many-core.md (the figures),
# run.log (everything printed), machine.txt (cores, CPU, memory, Python, the bundle's MANIFEST).
# It unpacks the bundle under $DEVICE_WORK (default a fresh /tmp/odradek-device.*; removed at the end
# unless KEEP_WORK=1), installs the wheels into a venv with pip --no-index (where the interpreter has no
# venv or pip, it unpacks them onto PYTHONPATH instead: they are plain wheels), puts the bundled JRE first
# on PATH and points tools/kafka_dist at the bundled jars (ODRADEK_CACHE), then runs the bench from the
# bundled checkout. The bench pins the brokers and the clients to disjoint cores itself (sched_setaffinity).
# $PYTHON picks the interpreter (default python3.12).
set -euo pipefail

BUNDLE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
OUT=${OUT:-$PWD/device-results}
PY=${PYTHON:-python3.12}
WORK=${DEVICE_WORK:-$(mktemp -d /tmp/odradek-device.XXXXXX)}
mkdir -p "$OUT" "$WORK"
exec > >(tee -a "$OUT/run.log") 2>&1
say() { echo "[device run $(date -u +%H:%M:%S)] $*"; }
cleanup() { [ "${KEEP_WORK:-0}" = 1 ] || rm -rf "$WORK"; }
trap cleanup EXIT

"$PY" -c 'import sys; assert sys.version_info[:2] == (3, 12), sys.version' \
    || { say "needs CPython 3.12 (the wheels are cp312): set PYTHON"; exit 1; }

say "unpacking $BUNDLE into $WORK"
for part in jre kafka wheels odradek; do
    "$PY" -c 'import sys, tarfile; tarfile.open(sys.argv[1], "r:xz").extractall(sys.argv[2])' \
        "$BUNDLE/$part.tar.xz" "$WORK"
done

if "$PY" -m venv "$WORK/venv" 2>/dev/null && "$WORK/venv/bin/python" -m pip --version >/dev/null 2>&1; then
    say "installing the wheels into a venv (pip --no-index)"
    "$WORK/venv/bin/python" -m pip install --quiet --no-index --find-links "$WORK/wheels" "$WORK"/wheels/*.whl
    VPY=$WORK/venv/bin/python
else
    say "no venv/pip for $PY: unpacking the wheels onto PYTHONPATH"
    "$PY" -c 'import sys, zipfile, glob
for w in glob.glob(sys.argv[1] + "/*.whl"):
    zipfile.ZipFile(w).extractall(sys.argv[2])' "$WORK/wheels" "$WORK/site"
    export PYTHONPATH=$WORK/site${PYTHONPATH:+:$PYTHONPATH}
    VPY=$PY
fi

export JAVA_HOME=$WORK/jre
export PATH=$WORK/jre/bin:$PATH
chmod +x "$WORK"/jre/bin/* "$WORK"/jre/lib/jspawnhelper 2>/dev/null || true
# tools/kafka_dist takes its jar cache as current (no Maven) when its stamp is the hash of the java/ build
# inputs it was made from and every jar set has a jar. The bench loads only the kafka set, the bundled
# one; the stamp is written for the bundled checkout's java/, and each other set gets a link to one of
# the kafka jars as a stand-in (nothing here loads them).
export ODRADEK_CACHE=$WORK/cache
mkdir -p "$ODRADEK_CACHE/jars"
mv "$WORK/kafka/jars" "$ODRADEK_CACHE/jars/kafka"
(cd "$WORK/odradek" && "$VPY" -c 'from tools.kafka_dist import JAR_SETS, _inputs_hash
print(_inputs_hash())
print(" ".join(s for s in JAR_SETS if s != "kafka"), file=open("'"$WORK"'/other-sets", "w"))') \
    > "$ODRADEK_CACHE/jars/.stamp"
for set in $(cat "$WORK/other-sets"); do
    mkdir -p "$ODRADEK_CACHE/jars/$set"
    ln -sf ../kafka/kafka-clients-4.4.0.jar "$ODRADEK_CACHE/jars/$set/stand-in.jar"
done

{
    echo "cores (affinity): $("$VPY" -c 'import os; print(len(os.sched_getaffinity(0)))'), nproc $(nproc 2>/dev/null || echo ?)"
    grep -m1 "model name" /proc/cpuinfo || true
    grep -E "MemTotal|MemAvailable" /proc/meminfo || true
    df -h /dev/shm 2>/dev/null | tail -1 || true
    uname -a
    "$VPY" -V
    java -version 2>&1 | head -1
    echo "--- bundle MANIFEST"
    cat "$BUNDLE/MANIFEST"
} > "$OUT/machine.txt"
say "$(head -1 "$OUT/machine.txt"); java: $(java -version 2>&1 | head -1)"
"$VPY" -c 'import confluent_kafka, uvloop, grpc, aetcd; print("clients: confluent-kafka", confluent_kafka.version()[0], "librdkafka", confluent_kafka.libversion()[0])'

cd "$WORK/odradek"
say "python -m bench.many_core --out $OUT $*"
"$VPY" -m bench.many_core --out "$OUT" "$@"
say "done: $OUT/many-core.md"
