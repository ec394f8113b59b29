# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The compiled build of :func:`epto.epidemic._fold.fold_groups` (see there for what
it computes; the Python build is the reference, and the tests run both).

Per copy: one probe of a table of (hash, id) pairs, with the hash the layer's
dict already stores (``_PyDict_Next`` hands it out), the id compared by
identity first (the copies of an event share its id object) and by ``==``
only on equal hashes. A copy already met writes nothing: no reference count
of its event changes, where ``dict |=`` replaces the value of every copy.
A new id is inserted in its group's dict with its known hash. The table
holds borrowed references: the layers own their ids for the whole call, and
a layer is never mutated once its ball exists.
"""

from cpython.object cimport PyObject
from libc.stdlib cimport calloc, free


cdef extern from "Python.h":
    ctypedef Py_ssize_t Py_hash_t
    int PyDict_Check(object o)
    int _PyDict_Next(object mp, Py_ssize_t *ppos, PyObject **pkey, PyObject **pvalue,
                     Py_hash_t *phash)
    int _PyDict_SetItem_KnownHash(object mp, object key, object item, Py_hash_t hash) except -1
    int PyObject_RichCompareBool(object a, object b, int op) except -1
    enum:
        Py_EQ


ctypedef struct Slot:
    PyObject *key
    Py_hash_t hash


cdef class _Table:
    """Open addressing, linear probing, at most half full."""

    cdef Slot *slots
    cdef Py_ssize_t mask
    cdef Py_ssize_t used

    def __cinit__(self, Py_ssize_t expected):
        cdef Py_ssize_t size = 64
        while size < 2 * expected:
            size <<= 1
        self.slots = <Slot *> calloc(size, sizeof(Slot))
        if self.slots == NULL:
            raise MemoryError()
        self.mask = size - 1
        self.used = 0

    def __dealloc__(self):
        free(self.slots)

    cdef int grow(self) except -1:
        cdef Py_ssize_t old_size = self.mask + 1
        cdef Py_ssize_t size = 2 * old_size
        cdef Slot *old = self.slots
        cdef Slot *slots = <Slot *> calloc(size, sizeof(Slot))
        cdef Py_ssize_t i, j, mask = size - 1
        if slots == NULL:
            raise MemoryError()
        for i in range(old_size):
            if old[i].key != NULL:
                j = <Py_ssize_t> (<size_t> old[i].hash & <size_t> mask)
                while slots[j].key != NULL:
                    j = (j + 1) & mask
                slots[j] = old[i]
        self.slots = slots
        self.mask = mask
        free(old)
        return 0

    cdef int add(self, PyObject *key, Py_hash_t h) except -1:
        """1 if ``key`` is new (now added), 0 if it was met before."""
        cdef Py_ssize_t i = <Py_ssize_t> (<size_t> h & <size_t> self.mask)
        cdef Slot *slot
        while True:
            slot = &self.slots[i]
            if slot.key == NULL:
                slot.key = key
                slot.hash = h
                self.used += 1
                if 2 * self.used > self.mask:
                    self.grow()
                return 1
            if slot.key == key:
                return 0
            if slot.hash == h and PyObject_RichCompareBool(<object> slot.key, <object> key, Py_EQ):
                return 0
            i = (i + 1) & self.mask


def fold_groups(groups):
    """Per group of ``groups`` (sequences of dicts or None, from the highest
    ttl down), the ids first met in it with their events, or None."""
    cdef Py_ssize_t expected = 0
    for group in groups:
        for layer in group:
            if layer is not None and len(layer) > expected:
                expected = len(layer)
    cdef _Table table = _Table(4 * expected)
    cdef list out = []
    cdef Py_ssize_t pos
    cdef PyObject *key
    cdef PyObject *value
    cdef Py_hash_t h
    cdef object merged
    cdef list kept = []
    for group in groups:
        merged = None
        for layer in group:
            if layer is None:
                continue
            if not PyDict_Check(layer):
                # Any other mapping is read as a dict, kept alive for the
                # table's borrowed references (the layers are always dicts).
                layer = dict(layer)
                kept.append(layer)
            pos = 0
            while _PyDict_Next(layer, &pos, &key, &value, &h):
                if table.add(key, h):
                    if merged is None:
                        merged = {}
                    _PyDict_SetItem_KnownHash(merged, <object> key, <object> value, h)
        out.append(merged)
    return out
