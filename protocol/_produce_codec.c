/* Native ProduceRequest decoder and ProduceResponse encoder, versions 3-13 (issue 18: the Produce
 * hot path's decode and encode, ~17 us of Python per request).
 *
 * Wire format (Kafka's ProduceRequest.json / ProduceResponse.json; v9+ "flexible": compact
 * strings, arrays and records with unsigned-varint lengths + 1, a tagged-field section closing
 * every struct; before v9 int16 string lengths, int32 array and records lengths, -1 = null):
 *
 *   ProduceRequest   transactional_id: nullable string; acks: int16; timeout_ms: int32;
 *                    topic_data: [name: string (v3-12) | topic_id: uuid (v13+, KIP-516);
 *                    partition_data: [index: int32; records: records]]
 *   ProduceResponse  responses: [name: string (v3-12) | topic_id: uuid (v13+); partition_responses: [index: int32;
 *                    error_code: int16; base_offset: int64; log_append_time_ms: int64;
 *                    log_start_offset: int64 (v5+); record_errors (v8+): [batch_index: int32;
 *                    batch_index_error_message: nullable string]; error_message: nullable string
 *                    (v8+); current_leader: tagged 0 (v10+)]]; throttle_time_ms: int32;
 *                    node_endpoints: tagged 0 (v10+)
 *
 * protocol/produce_codec.py wires these into odradek.protocol.codec's MessageCodec for those versions; the
 * generated Python codec stays the reference. Both must give the same result for every input:
 * decode the same dict (records as zero-copy memoryview slices) or a DecodeError, with the same
 * rules as protocol/primitives.py (varints of at most 5 bytes, counts beyond the bytes left
 * refused, strict UTF-8, non-null topic names, unknown tagged fields skipped; from v13 a topic's
 * name is the empty string, the generated decoder's default, and its id a uuid.UUID); encode the same
 * bytes. The encoder takes only what the handler builds (dicts, lists, ints, str or None) and
 * returns False without writing anything for any other shape (a pre-encoded element, a tagged
 * field to write, an int out of its field's range), so the Python encoder then does it.
 * tests/protocol/test_produce_codec.py compares the two on generated and mutated messages.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static PyObject *DecodeError; /* odradek.protocol.primitives.DecodeError, given by init() */
static PyObject *UuidFromBytes; /* 16 bytes -> uuid.UUID (v13's topic ids), given by init() */
static PyObject *SixtyFour;     /* the int 64: a uuid's int >> 64 is its high half */

enum {
    K_TRANSACTIONAL_ID, K_ACKS, K_TIMEOUT_MS, K_TOPIC_DATA, K_NAME, K_PARTITION_DATA, K_INDEX, K_RECORDS,
    K_RESPONSES, K_PARTITION_RESPONSES, K_ERROR_CODE, K_BASE_OFFSET, K_LOG_APPEND_TIME_MS,
    K_LOG_START_OFFSET, K_RECORD_ERRORS, K_BATCH_INDEX, K_BATCH_INDEX_ERROR_MESSAGE, K_ERROR_MESSAGE,
    K_CURRENT_LEADER, K_THROTTLE_TIME_MS, K_NODE_ENDPOINTS, K_TOPIC_ID, K_INT, K_COUNT
};
static const char *key_names[K_COUNT] = {
    "transactional_id", "acks", "timeout_ms", "topic_data", "name", "partition_data", "index", "records",
    "responses", "partition_responses", "error_code", "base_offset", "log_append_time_ms",
    "log_start_offset", "record_errors", "batch_index", "batch_index_error_message", "error_message",
    "current_leader", "throttle_time_ms", "node_endpoints", "topic_id", "int",
};
static PyObject *keys[K_COUNT];

/* ---- decoding --------------------------------------------------------------------------- */

typedef struct {
    PyObject *view;    /* the memoryview being decoded: records are slices of it */
    const uint8_t *p;
    Py_ssize_t len;
    Py_ssize_t pos;
    int flexible;
    int by_id; /* v13+: topics by topic_id */
} Reader;

static int fail(const char *message)
{
    PyErr_SetString(DecodeError, message);
    return -1;
}

/* Kafka's unsigned varint, at most 5 bytes (odradek.protocol.primitives.read_uvarint). */
static int read_uvarint(Reader *r, uint64_t *out)
{
    uint64_t result = 0;
    int shift = 0;
    for (;;) {
        if (r->pos >= r->len)
            return fail("truncated varint");
        uint8_t b = r->p[r->pos++];
        result |= (uint64_t)(b & 0x7F) << shift;
        if (b < 0x80) {
            *out = result;
            return 0;
        }
        shift += 7;
        if (shift > 28)
            return fail("unsigned varint longer than 5 bytes");
    }
}

static int need(Reader *r, uint64_t size)
{
    if (size > (uint64_t)(r->len - r->pos))
        return fail("field needs more bytes than the frame has");
    return 0;
}

static int read_int16(Reader *r, int16_t *out)
{
    if (r->len - r->pos < 2)
        return fail("truncated int16");
    *out = (int16_t)((r->p[r->pos] << 8) | r->p[r->pos + 1]);
    r->pos += 2;
    return 0;
}

static int read_int32(Reader *r, int32_t *out)
{
    if (r->len - r->pos < 4)
        return fail("truncated int32");
    const uint8_t *q = r->p + r->pos;
    *out = (int32_t)(((uint32_t)q[0] << 24) | ((uint32_t)q[1] << 16) | ((uint32_t)q[2] << 8) | q[3]);
    r->pos += 4;
    return 0;
}

/* A string's or records' length, or an array's count: -1 for null. Flexible versions: an
 * unsigned varint holding it + 1; older ones: a big-endian int of ``width`` bytes (2 for strings,
 * 4 for arrays and records), where anything below -1 is refused. */
static int read_nullable_length(Reader *r, int width, int64_t *out)
{
    int64_t n;
    if (r->flexible) {
        uint64_t raw;
        if (read_uvarint(r, &raw) < 0)
            return -1;
        n = (int64_t)raw - 1;
    } else if (width == 2) {
        int16_t raw;
        if (read_int16(r, &raw) < 0)
            return -1;
        n = raw;
    } else {
        int32_t raw;
        if (read_int32(r, &raw) < 0)
            return -1;
        n = raw;
    }
    if (n < -1)
        return fail("invalid length");
    *out = n;
    return 0;
}

/* New reference to the string (or None); NULL with DecodeError set. */
static PyObject *read_string(Reader *r)
{
    int64_t n;
    if (read_nullable_length(r, 2, &n) < 0)
        return NULL;
    if (n < 0)
        Py_RETURN_NONE;
    if (need(r, (uint64_t)n) < 0)
        return NULL;
    PyObject *s = PyUnicode_DecodeUTF8((const char *)r->p + r->pos, (Py_ssize_t)n, "strict");
    if (s == NULL) {
        if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
            PyErr_Clear();
            fail("string is not UTF-8");
        }
        return NULL;
    }
    r->pos += (Py_ssize_t)n;
    return s;
}

/* A struct array's element count: -1 for null; a count beyond the bytes left is refused. */
static int read_count(Reader *r, int64_t *out)
{
    if (read_nullable_length(r, 4, out) < 0)
        return -1;
    if (*out > (int64_t)(r->len - r->pos))
        return fail("array count exceeds the bytes left");
    return 0;
}

static PyObject *read_records(Reader *r)
{
    int64_t n;
    if (read_nullable_length(r, 4, &n) < 0)
        return NULL;
    if (n < 0)
        Py_RETURN_NONE;
    if (need(r, (uint64_t)n) < 0)
        return NULL;
    PyObject *slice = PySequence_GetSlice(r->view, r->pos, r->pos + (Py_ssize_t)n);
    if (slice != NULL)
        r->pos += (Py_ssize_t)n;
    return slice;
}

/* A flexible struct's tagged fields: none of them is known to the request, so all are skipped. */
static int skip_tagged_fields(Reader *r)
{
    if (!r->flexible)
        return 0;
    uint64_t count, tag, size;
    if (read_uvarint(r, &count) < 0)
        return -1;
    for (uint64_t i = 0; i < count; i++) {
        if (read_uvarint(r, &tag) < 0 || read_uvarint(r, &size) < 0 || need(r, size) < 0)
            return -1;
        r->pos += (Py_ssize_t)size;
    }
    return 0;
}

/* Steals ``value``; -1 if it is NULL or the store fails. */
static int put(PyObject *dict, int key, PyObject *value)
{
    if (value == NULL)
        return -1;
    int rc = PyDict_SetItem(dict, keys[key], value);
    Py_DECREF(value);
    return rc;
}

/* Steals ``item``. */
static int append(PyObject *list, PyObject *item)
{
    int rc = PyList_Append(list, item);
    Py_DECREF(item);
    return rc;
}

static PyObject *decode_partition(Reader *r)
{
    int32_t index;
    PyObject *m = PyDict_New();
    if (m == NULL)
        return NULL;
    if (read_int32(r, &index) < 0 || put(m, K_INDEX, PyLong_FromLong(index)) < 0
        || put(m, K_RECORDS, read_records(r)) < 0 || skip_tagged_fields(r) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

/* New reference to the uuid.UUID of the next 16 bytes; NULL with an error set. */
static PyObject *read_uuid(Reader *r)
{
    if (r->len - r->pos < 16) {
        fail("truncated uuid");
        return NULL;
    }
    PyObject *raw = PyBytes_FromStringAndSize((const char *)r->p + r->pos, 16);
    if (raw == NULL)
        return NULL;
    r->pos += 16;
    PyObject *id = PyObject_CallOneArg(UuidFromBytes, raw);
    Py_DECREF(raw);
    return id;
}

static PyObject *decode_topic(Reader *r)
{
    PyObject *m = PyDict_New();
    if (m == NULL)
        return NULL;
    int64_t n;
    if (r->by_id) {
        if (put(m, K_NAME, PyUnicode_FromStringAndSize("", 0)) < 0 || put(m, K_TOPIC_ID, read_uuid(r)) < 0)
            goto error;
    } else {
        PyObject *name = read_string(r);
        if (name == Py_None) {
            Py_DECREF(name);
            fail("non-nullable field is null");
            name = NULL;
        }
        if (put(m, K_NAME, name) < 0)
            goto error;
    }
    if (read_count(r, &n) < 0)
        goto error;
    /* Grown element by element, as the generated decoder does: a count is only checked against
     * the bytes left, so sizing the list from it would let a 100 MiB frame claim 800 MiB. */
    PyObject *list = PyList_New(0);
    if (put(m, K_PARTITION_DATA, list) < 0)
        goto error;
    for (int64_t i = 0; i < n; i++) {
        PyObject *partition = decode_partition(r);
        if (partition == NULL || append(list, partition) < 0) /* the dict holds the list */
            goto error;
    }
    if (skip_tagged_fields(r) < 0)
        goto error;
    return m;
error:
    Py_DECREF(m);
    return NULL;
}

/* decode_request(view, pos, flexible, by_id) -> (message dict, end position) */
static PyObject *decode_request(PyObject *self, PyObject *args)
{
    PyObject *view;
    Py_ssize_t pos;
    int flexible, by_id;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!npp:decode_request", &PyMemoryView_Type, &view, &pos, &flexible, &by_id))
        return NULL;
    if (by_id && UuidFromBytes == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "init() was not given the uuid factory");
        return NULL;
    }
    Py_buffer buffer;
    if (PyObject_GetBuffer(view, &buffer, PyBUF_SIMPLE) < 0)
        return NULL;
    Reader r = {view, (const uint8_t *)buffer.buf, buffer.len, pos, flexible, by_id};
    PyObject *m = NULL, *result = NULL;
    if (pos < 0 || pos > buffer.len) {
        fail("decode position outside the frame");
        goto done;
    }
    m = PyDict_New();
    if (m == NULL)
        goto done;
    int16_t acks;
    int32_t timeout_ms;
    int64_t n;
    if (put(m, K_TRANSACTIONAL_ID, read_string(&r)) < 0 || read_int16(&r, &acks) < 0
        || read_int32(&r, &timeout_ms) < 0 || put(m, K_ACKS, PyLong_FromLong(acks)) < 0
        || put(m, K_TIMEOUT_MS, PyLong_FromLong(timeout_ms)) < 0 || read_count(&r, &n) < 0)
        goto done;
    PyObject *list = PyList_New(0); /* grown as elements decode: see decode_topic */
    if (put(m, K_TOPIC_DATA, list) < 0)
        goto done;
    for (int64_t i = 0; i < n; i++) {
        PyObject *topic = decode_topic(&r);
        if (topic == NULL || append(list, topic) < 0)
            goto done;
    }
    if (skip_tagged_fields(&r) < 0)
        goto done;
    result = Py_BuildValue("(On)", m, r.pos);
done:
    Py_XDECREF(m);
    PyBuffer_Release(&buffer);
    return result;
}

/* ---- encoding --------------------------------------------------------------------------- */

typedef struct {
    uint8_t *data;
    Py_ssize_t len, cap;
    int flexible;
    int version;
} Writer;

/* 0 ok; -1 a Python error (memory); 1 "not mine": the Python encoder is to do this message. */
enum { OK = 0, ERROR = -1, DECLINE = 1 };

static int grow(Writer *w, Py_ssize_t more)
{
    if (w->len + more <= w->cap)
        return OK;
    Py_ssize_t cap = w->cap ? w->cap : 256;
    while (cap < w->len + more)
        cap *= 2;
    uint8_t *data = PyMem_Realloc(w->data, (size_t)cap);
    if (data == NULL) {
        PyErr_NoMemory();
        return ERROR;
    }
    w->data = data;
    w->cap = cap;
    return OK;
}

static int put_bytes(Writer *w, const void *src, Py_ssize_t n)
{
    if (grow(w, n) != OK)
        return ERROR;
    memcpy(w->data + w->len, src, (size_t)n);
    w->len += n;
    return OK;
}

static int put_be(Writer *w, uint64_t value, int size)
{
    if (grow(w, size) != OK)
        return ERROR;
    for (int shift = 8 * (size - 1); shift >= 0; shift -= 8)
        w->data[w->len++] = (uint8_t)(value >> shift);
    return OK;
}

static int put_uvarint(Writer *w, uint64_t value)
{
    if (grow(w, 10) != OK)
        return ERROR;
    while (value >= 0x80) {
        w->data[w->len++] = (uint8_t)((value & 0x7F) | 0x80);
        value >>= 7;
    }
    w->data[w->len++] = (uint8_t)value;
    return OK;
}

/* The field's value, borrowed; NULL when absent (the caller uses the default). */
static PyObject *field(PyObject *m, int key)
{
    return PyDict_GetItemWithError(m, keys[key]);
}

/* An int field within [lo, hi] (its default when absent); DECLINE for anything else. */
static int int_field(PyObject *m, int key, int64_t fallback, int64_t lo, int64_t hi, int64_t *out)
{
    PyObject *v = field(m, key);
    if (v == NULL) {
        if (PyErr_Occurred())
            return ERROR;
        *out = fallback;
        return OK;
    }
    if (!PyLong_Check(v)) /* int, bool or IntEnum (ErrorCode), as struct.pack takes them */
        return DECLINE;
    int overflow;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow || (x == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return DECLINE;
    }
    if (x < lo || x > hi)
        return DECLINE;
    *out = x;
    return OK;
}

static int put_int_field(Writer *w, PyObject *m, int key, int64_t fallback, int size)
{
    int64_t lo = size == 2 ? INT16_MIN : size == 4 ? INT32_MIN : INT64_MIN;
    int64_t hi = size == 2 ? INT16_MAX : size == 4 ? INT32_MAX : INT64_MAX;
    int64_t x;
    int rc = int_field(m, key, fallback, lo, hi, &x);
    if (rc != OK)
        return rc;
    return put_be(w, (uint64_t)x, size);
}

/* A string field: absent is null when ``nullable``, else the empty string; None in a
 * non-nullable field is left to the Python encoder. */
static int put_string_field(Writer *w, PyObject *m, int key, int nullable)
{
    PyObject *v = field(m, key);
    if (v == NULL && PyErr_Occurred())
        return ERROR;
    if (v == NULL || v == Py_None) {
        if (v == Py_None && !nullable)
            return DECLINE; /* the Python encoder raises for it */
        if (v == NULL && !nullable) /* absent: the empty string */
            return w->flexible ? put_uvarint(w, 1) : put_be(w, 0, 2);
        return w->flexible ? put_uvarint(w, 0) : put_be(w, 0xFFFF, 2);
    }
    if (!PyUnicode_CheckExact(v))
        return DECLINE;
    Py_ssize_t n;
    const char *utf8 = PyUnicode_AsUTF8AndSize(v, &n);
    if (utf8 == NULL) {
        PyErr_Clear(); /* e.g. lone surrogates: the Python encoder raises its own error */
        return DECLINE;
    }
    if (w->flexible) {
        if (put_uvarint(w, (uint64_t)n + 1) != OK)
            return ERROR;
    } else {
        if (n > INT16_MAX)
            return DECLINE;
        if (put_be(w, (uint64_t)n, 2) != OK)
            return ERROR;
    }
    return put_bytes(w, utf8, n);
}

/* A struct array field: absent = empty, None = null; DECLINE unless a list of plain dicts. */
static int array_field(Writer *w, PyObject *m, int key, PyObject **list)
{
    PyObject *v = field(m, key);
    if (v == NULL && PyErr_Occurred())
        return ERROR;
    *list = NULL;
    if (v == Py_None)
        return w->flexible ? put_uvarint(w, 0) : put_be(w, 0xFFFFFFFF, 4);
    Py_ssize_t n = 0;
    if (v != NULL) {
        if (!PyList_CheckExact(v))
            return DECLINE;
        n = PyList_GET_SIZE(v);
        for (Py_ssize_t i = 0; i < n; i++)
            if (!PyDict_CheckExact(PyList_GET_ITEM(v, i)))
                return DECLINE;
        *list = v;
    }
    if (!w->flexible && n > INT32_MAX)
        return DECLINE;
    return w->flexible ? put_uvarint(w, (uint64_t)n + 1) : put_be(w, (uint64_t)n, 4);
}

static int put_tag_end(Writer *w)
{
    return w->flexible ? put_uvarint(w, 0) : OK;
}

#define TRY(call) do { int rc_ = (call); if (rc_ != OK) return rc_; } while (0)

static int encode_record_error(Writer *w, PyObject *m)
{
    TRY(put_int_field(w, m, K_BATCH_INDEX, 0, 4));
    TRY(put_string_field(w, m, K_BATCH_INDEX_ERROR_MESSAGE, 1));
    return put_tag_end(w);
}

static int encode_partition(Writer *w, PyObject *m)
{
    TRY(put_int_field(w, m, K_INDEX, 0, 4));
    TRY(put_int_field(w, m, K_ERROR_CODE, 0, 2));
    TRY(put_int_field(w, m, K_BASE_OFFSET, 0, 8));
    TRY(put_int_field(w, m, K_LOG_APPEND_TIME_MS, -1, 8));
    if (w->version >= 5)
        TRY(put_int_field(w, m, K_LOG_START_OFFSET, -1, 8));
    if (w->version >= 8) {
        PyObject *errors;
        TRY(array_field(w, m, K_RECORD_ERRORS, &errors));
        if (errors != NULL)
            for (Py_ssize_t i = 0; i < PyList_GET_SIZE(errors); i++)
                TRY(encode_record_error(w, PyList_GET_ITEM(errors, i)));
        TRY(put_string_field(w, m, K_ERROR_MESSAGE, 1));
    }
    if (w->version >= 10) {
        /* current_leader is a tagged field written only when set: the Python encoder does that. */
        PyObject *leader = field(m, K_CURRENT_LEADER);
        if (leader == NULL && PyErr_Occurred())
            return ERROR;
        if (leader != NULL && leader != Py_None)
            return DECLINE;
    }
    return put_tag_end(w);
}

/* v13's topic_id: absent or None is the zero id (as the generated encoder writes it). A uuid.UUID's
 * 16 bytes are its ``int`` (an attribute; ``bytes`` is a Python property that builds them each
 * time), big-endian; anything without an int in [0, 2**128) is left to the Python encoder. */
static int put_uuid_field(Writer *w, PyObject *m, int key)
{
    PyObject *v = field(m, key);
    if (v == NULL && PyErr_Occurred())
        return ERROR;
    if (v == NULL || v == Py_None)
        return put_be(w, 0, 8) == OK ? put_be(w, 0, 8) : ERROR;
    PyObject *value = PyObject_GetAttr(v, keys[K_INT]);
    if (value == NULL || !PyLong_Check(value)) {
        Py_XDECREF(value);
        PyErr_Clear();
        return DECLINE;
    }
    uint64_t high = (uint64_t)-1, low = PyLong_AsUnsignedLongLongMask(value);
    PyObject *shifted = low == (uint64_t)-1 && PyErr_Occurred() ? NULL : PyNumber_Rshift(value, SixtyFour);
    if (shifted != NULL) {
        high = PyLong_AsUnsignedLongLong(shifted); /* OverflowError: negative, or 2**128 and above */
        Py_DECREF(shifted);
    }
    Py_DECREF(value);
    if (PyErr_Occurred()) {
        PyErr_Clear();
        return DECLINE;
    }
    return put_be(w, high, 8) == OK ? put_be(w, low, 8) : ERROR;
}

static int encode_topic(Writer *w, PyObject *m)
{
    PyObject *partitions;
    if (w->version >= 13)
        TRY(put_uuid_field(w, m, K_TOPIC_ID));
    else
        TRY(put_string_field(w, m, K_NAME, 0));
    TRY(array_field(w, m, K_PARTITION_RESPONSES, &partitions));
    if (partitions != NULL)
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(partitions); i++)
            TRY(encode_partition(w, PyList_GET_ITEM(partitions, i)));
    return put_tag_end(w);
}

static int encode_message(Writer *w, PyObject *m)
{
    PyObject *topics;
    TRY(array_field(w, m, K_RESPONSES, &topics));
    if (topics != NULL)
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(topics); i++)
            TRY(encode_topic(w, PyList_GET_ITEM(topics, i)));
    TRY(put_int_field(w, m, K_THROTTLE_TIME_MS, 0, 4));
    if (w->version >= 10) {
        PyObject *endpoints = field(m, K_NODE_ENDPOINTS);
        if (endpoints == NULL && PyErr_Occurred())
            return ERROR;
        if (endpoints != NULL && PyObject_IsTrue(endpoints) != 0)
            return DECLINE; /* a tagged field to write (or a truth test that failed) */
    }
    return put_tag_end(w);
}

/* encode_response(message, out, version) -> True once appended to ``out``; False: not done,
 * ``out`` untouched (the caller encodes with the Python codec). */
static PyObject *encode_response(PyObject *self, PyObject *args)
{
    PyObject *message, *out;
    int version;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!O!i:encode_response", &PyDict_Type, &message, &PyByteArray_Type, &out, &version))
        return NULL;
    if (version < 3 || version > 13 || !PyDict_CheckExact(message))
        Py_RETURN_FALSE;
    Writer w = {NULL, 0, 0, version >= 9, version};
    int rc = encode_message(&w, message);
    if (rc == OK) {
        Py_ssize_t at = PyByteArray_GET_SIZE(out);
        if (PyByteArray_Resize(out, at + w.len) < 0)
            rc = ERROR;
        else if (w.len)
            memcpy(PyByteArray_AS_STRING(out) + at, w.data, (size_t)w.len);
    }
    PyMem_Free(w.data);
    if (rc == ERROR) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_RuntimeError, "encode_response failed");
        return NULL;
    }
    if (rc == DECLINE) {
        PyErr_Clear();
        Py_RETURN_FALSE;
    }
    Py_RETURN_TRUE;
}

static PyObject *init(PyObject *self, PyObject *args)
{
    PyObject *error_class, *uuid_from_bytes;
    (void)self;
    if (!PyArg_ParseTuple(args, "OO:init", &error_class, &uuid_from_bytes))
        return NULL;
    Py_INCREF(error_class);
    Py_XSETREF(DecodeError, error_class);
    Py_INCREF(uuid_from_bytes);
    Py_XSETREF(UuidFromBytes, uuid_from_bytes);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"init", init, METH_VARARGS,
     "init(DecodeError, uuid_from_bytes): the exception class malformed requests raise; 16 bytes -> uuid.UUID"},
    {"decode_request", decode_request, METH_VARARGS,
     "decode_request(view, pos, flexible, by_id) -> (ProduceRequest dict, end); see protocol/produce_codec.py"},
    {"encode_response", encode_response, METH_VARARGS,
     "encode_response(message, out, version) -> bool; see protocol/produce_codec.py"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "odradek.protocol._produce_codec",
    "Native ProduceRequest decoder and ProduceResponse encoder (odradek.protocol.produce_codec).",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__produce_codec(void)
{
    for (int i = 0; i < K_COUNT; i++) {
        keys[i] = PyUnicode_InternFromString(key_names[i]);
        if (keys[i] == NULL)
            return NULL;
    }
    SixtyFour = PyLong_FromLong(64);
    if (SixtyFour == NULL)
        return NULL;
    return PyModule_Create(&module);
}
