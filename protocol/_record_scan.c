/* Native pass over the records of a v2 record batch: framing checks without Python objects.
 *
 * protocol/record_scan.py documents the rules and holds the pure-Python twin (used when this
 * module was not built); tests/protocol/test_record_scan.py checks that both agree on good and
 * mutated batches. Keep the two in step: same rules, same order of checks, same results.
 *
 * scan(data, start, end, count, flags) walks `count` records in data[start:end] and returns
 *   None                                  every record well-formed, no per-record finding;
 *   (kind, record_index, a, b)            the first framing error (kinds: record_scan.E_*);
 *   [(record_index, kind, value), ...]    per-record findings (record_scan.R_*), framing fine.
 * flags: 1 = report null keys (compacted topics), 2 = report offset deltas other than the index.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

enum {
    E_EOF = 1,          /* count says more records than there are */
    E_STRUCTURE = 2,    /* malformed varint, field beyond its record, bad length */
    E_RECORD_SIZE = 3,  /* a: record length, b: bytes remaining */
    E_SIZE_MISMATCH = 4,/* a: record length, b: bytes its fields take */
    E_HEADERS_NEG = 5,  /* a: header count */
    E_HEADERS_BIG = 6,  /* a: header count */
    E_HEADER_KEY = 7,   /* a: header key length */
    E_REMAINING = 8,    /* bytes left after the last record */
    E_COUNT = 9,        /* a: negative record count */
};
enum { R_OFFSET_DELTA = 1, R_NULL_KEY = 2 };
enum { F_KEYS = 1, F_DELTAS = 2 };

/* Zigzag varint of at most 5 bytes whose value fits 32 bits. 0 ok, 1 truncated, 2 malformed. */
static inline int read_varint(const uint8_t *p, Py_ssize_t *pos, Py_ssize_t end, int32_t *out)
{
    uint32_t raw = 0;
    Py_ssize_t i = *pos;
    if (i < end && p[i] < 0x80) { /* the common one-byte varint */
        raw = p[i];
        *pos = i + 1;
        *out = (int32_t)((raw >> 1) ^ (0u - (raw & 1)));
        return 0;
    }
    for (int n = 0; n < 5; n++) {
        if (i >= end)
            return 1;
        uint8_t b = p[i++];
        if (n == 4 && b > 0x0F)
            return 2;
        raw |= (uint32_t)(b & 0x7F) << (7 * n);
        if (b < 0x80) {
            *pos = i;
            *out = (int32_t)((raw >> 1) ^ (0u - (raw & 1)));
            return 0;
        }
    }
    return 2; /* unreachable: the fifth byte either ends the varint or is rejected */
}

/* Zigzag varlong of at most 10 bytes whose value fits 64 bits; the value is not needed. */
static inline int skip_varlong(const uint8_t *p, Py_ssize_t *pos, Py_ssize_t end)
{
    Py_ssize_t i = *pos;
    for (int n = 0; n < 10; n++) {
        if (i >= end)
            return 1;
        uint8_t b = p[i++];
        if (n == 9 && b > 0x01)
            return 2;
        if (b < 0x80) {
            *pos = i;
            return 0;
        }
    }
    return 2;
}

/* A length-prefixed byte field (-1 = null) inside [*pos, end). 0 ok, else malformed. */
static inline int skip_bytes(const uint8_t *p, Py_ssize_t *pos, Py_ssize_t end, int32_t *length)
{
    if (read_varint(p, pos, end, length))
        return 1;
    if (*length < -1 || *length > end - *pos)
        return 1;
    if (*length > 0)
        *pos += *length;
    return 0;
}

static PyObject *error(int kind, long index, long long a, long long b)
{
    return Py_BuildValue("(ilLL)", kind, index, a, b);
}

static int add_finding(PyObject **findings, long index, int kind, long value)
{
    if (*findings == NULL && (*findings = PyList_New(0)) == NULL)
        return -1;
    PyObject *item = Py_BuildValue("(lil)", index, kind, value);
    if (item == NULL)
        return -1;
    int rc = PyList_Append(*findings, item);
    Py_DECREF(item);
    return rc;
}

static PyObject *scan_buffer(const uint8_t *p, Py_ssize_t pos, Py_ssize_t data_end, long count, int flags)
{
    PyObject *findings = NULL;
    PyObject *result = NULL;
    if (count < 0)
        return error(E_COUNT, 0, count, 0);
    for (long index = 0; index < count; index++) {
        int32_t length, delta, key_length, value_length, headers, hkey, hvalue;
        if (pos >= data_end) {
            result = error(E_EOF, index, 0, 0);
            goto done;
        }
        int rc = read_varint(p, &pos, data_end, &length);
        if (rc) {
            result = error(rc == 1 ? E_EOF : E_STRUCTURE, index, 0, 0);
            goto done;
        }
        if (length < 0 || length > data_end - pos) {
            result = error(E_RECORD_SIZE, index, length, data_end - pos);
            goto done;
        }
        Py_ssize_t start = pos, end = pos + length;
        if (end - pos < 1) { /* attributes */
            result = error(E_STRUCTURE, index, 0, 0);
            goto done;
        }
        pos += 1;
        if (skip_varlong(p, &pos, end) || read_varint(p, &pos, end, &delta)
                || skip_bytes(p, &pos, end, &key_length) || skip_bytes(p, &pos, end, &value_length)
                || read_varint(p, &pos, end, &headers)) {
            result = error(E_STRUCTURE, index, 0, 0);
            goto done;
        }
        if (headers < 0) {
            result = error(E_HEADERS_NEG, index, headers, 0);
            goto done;
        }
        if (headers > end - pos) {
            result = error(E_HEADERS_BIG, index, headers, 0);
            goto done;
        }
        for (int32_t h = 0; h < headers; h++) {
            if (read_varint(p, &pos, end, &hkey)) {
                result = error(E_STRUCTURE, index, 0, 0);
                goto done;
            }
            if (hkey < 0) {
                result = error(E_HEADER_KEY, index, hkey, 0);
                goto done;
            }
            if (hkey > end - pos) {
                result = error(E_STRUCTURE, index, 0, 0);
                goto done;
            }
            pos += hkey;
            if (skip_bytes(p, &pos, end, &hvalue)) {
                result = error(E_STRUCTURE, index, 0, 0);
                goto done;
            }
        }
        if (pos != end) {
            result = error(E_SIZE_MISMATCH, index, length, pos - start);
            goto done;
        }
        if ((flags & F_DELTAS) && delta != index) {
            if (add_finding(&findings, index, R_OFFSET_DELTA, delta) < 0)
                goto fail;
        } else if ((flags & F_KEYS) && key_length < 0) {
            if (add_finding(&findings, index, R_NULL_KEY, key_length) < 0)
                goto fail;
        }
    }
    if (pos != data_end) {
        result = error(E_REMAINING, count, data_end - pos, 0);
        goto done;
    }
    if (findings != NULL)
        return findings;
    Py_RETURN_NONE;
done:
    Py_XDECREF(findings);
    return result;
fail:
    Py_XDECREF(findings);
    return NULL;
}

static PyObject *scan(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t start, end;
    long count;
    int flags;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*nnli:scan", &view, &start, &end, &count, &flags))
        return NULL;
    if (start < 0 || end > view.len || start > end) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "scan: start/end outside the buffer");
        return NULL;
    }
    PyObject *result = scan_buffer((const uint8_t *)view.buf, start, end, count, flags);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS, "scan(data, start, end, count, flags): see protocol/record_scan.py"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "odradek.protocol._record_scan", "Native record framing checks (odradek.protocol.record_scan).",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__record_scan(void)
{
    return PyModule_Create(&module);
}
