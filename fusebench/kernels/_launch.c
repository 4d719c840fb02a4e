/* One kernel launch from Python in C: DirectLaunch's call without the interpreter in between.
 *
 * A launcher is a capsule holding everything a DirectLaunch decides once (the driver's
 * cuLaunchKernelEx, the function, grid, block, shared memory, launch attributes, and each
 * parameter slot's kind).  launch(capsule, *args) reads the tensors' data pointers and the
 * scalars, asks `stream_of(device)` for the stream, and calls the driver with a parameter block
 * on its own stack (so no lock: concurrent calls do not share it).  It returns the driver's
 * CUresult; the caller falls back to Triton's launcher on anything but 0.
 *
 * Built at first use by fusebench.kernels.cuda_launch with the C compiler Triton itself needs;
 * no CUDA headers: the two driver structures are mirrored below, as cuda_launch.py mirrors them
 * for ctypes.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define MAX_SLOTS 64

typedef struct {  /* CUlaunchAttribute: an id and a 64-byte value union */
    unsigned int id;
    char pad[4];
    unsigned int value[16];
} LaunchAttribute;

typedef struct {  /* CUlaunchConfig */
    unsigned int gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes;
    void *hStream;
    LaunchAttribute *attrs;
    unsigned int numAttrs;
} LaunchConfig;

typedef int (*LaunchKernelEx)(const LaunchConfig *, void *, void **, void **);

/* What a parameter slot holds: a constant, argument i's data_ptr(), or argument i as a scalar. */
enum { CONST = 0, PTR = 1, I32 = 2, U32 = 3, I64 = 4, U64 = 5, F32 = 6 };

typedef struct {
    LaunchKernelEx launch;
    void *function;
    LaunchConfig config;
    LaunchAttribute attrs[2];
    int n_slots;
    unsigned char kind[MAX_SLOTS];
    int arg[MAX_SLOTS];
    uint64_t constant[MAX_SLOTS];
    PyObject *stream_of;  /* owned */
    PyObject *device;     /* owned */
} Launcher;

static PyObject *data_ptr_name;

static void destroy(PyObject *capsule) {
    Launcher *l = (Launcher *)PyCapsule_GetPointer(capsule, "fusebench.launcher");
    if (l == NULL)
        return;
    Py_XDECREF(l->stream_of);
    Py_XDECREF(l->device);
    PyMem_Free(l);
}

/* make(launch, function, grid(3), block, shared, attrs((id, value), ...), kinds: bytes,
 *      args: tuple of int, constants: tuple of int, stream_of, device) -> capsule */
static PyObject *make(PyObject *self, PyObject *a) {
    unsigned long long launch, function;
    unsigned int gx, gy, gz, block, shared;
    PyObject *attrs, *args, *constants, *stream_of, *device;
    const char *kinds;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(a, "KK(III)IIO!y#O!O!OO", &launch, &function, &gx, &gy, &gz, &block, &shared,
                          &PyTuple_Type, &attrs, &kinds, &n, &PyTuple_Type, &args, &PyTuple_Type, &constants,
                          &stream_of, &device))
        return NULL;
    if (n > MAX_SLOTS || PyTuple_GET_SIZE(args) != n || PyTuple_GET_SIZE(constants) != n
            || PyTuple_GET_SIZE(attrs) > 2) {
        PyErr_SetString(PyExc_ValueError, "launcher: too many slots or attributes, or mismatched lengths");
        return NULL;
    }
    Launcher *l = (Launcher *)PyMem_Calloc(1, sizeof(Launcher));
    if (l == NULL)
        return PyErr_NoMemory();
    l->launch = (LaunchKernelEx)(uintptr_t)launch;
    l->function = (void *)(uintptr_t)function;
    l->config.gridDimX = gx, l->config.gridDimY = gy, l->config.gridDimZ = gz;
    l->config.blockDimX = block, l->config.blockDimY = 1, l->config.blockDimZ = 1;
    l->config.sharedMemBytes = shared;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(attrs); i++) {
        unsigned int id, value;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(attrs, i), "II", &id, &value)) {
            PyMem_Free(l);
            return NULL;
        }
        l->attrs[i].id = id, l->attrs[i].value[0] = value;
    }
    l->config.attrs = PyTuple_GET_SIZE(attrs) ? l->attrs : NULL;
    l->config.numAttrs = (unsigned int)PyTuple_GET_SIZE(attrs);
    l->n_slots = (int)n;
    for (Py_ssize_t i = 0; i < n; i++) {
        l->kind[i] = (unsigned char)kinds[i];
        l->arg[i] = (int)PyLong_AsLong(PyTuple_GET_ITEM(args, i));
        l->constant[i] = PyLong_AsUnsignedLongLongMask(PyTuple_GET_ITEM(constants, i));
    }
    if (PyErr_Occurred()) {
        PyMem_Free(l);
        return NULL;
    }
    Py_INCREF(stream_of), Py_INCREF(device);
    l->stream_of = stream_of, l->device = device;
    PyObject *capsule = PyCapsule_New(l, "fusebench.launcher", destroy);
    if (capsule == NULL) {
        Py_DECREF(stream_of), Py_DECREF(device);
        PyMem_Free(l);
    }
    return capsule;
}

/* launch(capsule, *args) -> the driver's CUresult (0: launched) */
static PyObject *launch(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 1) {
        PyErr_SetString(PyExc_TypeError, "launch(launcher, *args)");
        return NULL;
    }
    Launcher *l = (Launcher *)PyCapsule_GetPointer(args[0], "fusebench.launcher");
    if (l == NULL)
        return NULL;
    uint64_t slots[MAX_SLOTS];
    void *params[MAX_SLOTS];
    for (int i = 0; i < l->n_slots; i++) {
        int k = l->kind[i];
        params[i] = &slots[i];
        slots[i] = 0;
        if (k == CONST) {
            slots[i] = l->constant[i];
            continue;
        }
        if (l->arg[i] + 1 >= nargs) {
            PyErr_SetString(PyExc_TypeError, "launch: too few arguments");
            return NULL;
        }
        PyObject *a = args[l->arg[i] + 1];
        if (k == PTR) {
            PyObject *p = PyObject_CallMethodNoArgs(a, data_ptr_name);
            if (p == NULL)
                return NULL;
            slots[i] = PyLong_AsUnsignedLongLongMask(p);
            Py_DECREF(p);
        } else if (k == F32) {
            float f = (float)PyFloat_AsDouble(a);
            memcpy(&slots[i], &f, sizeof f);
        } else if (k == I32) {
            int32_t v = (int32_t)PyLong_AsLong(a);
            memcpy(&slots[i], &v, sizeof v);
        } else if (k == U32) {
            uint32_t v = (uint32_t)PyLong_AsUnsignedLongMask(a);
            memcpy(&slots[i], &v, sizeof v);
        } else {  /* I64, U64: the same 8 bytes */
            slots[i] = PyLong_AsUnsignedLongLongMask(a);
        }
        if (PyErr_Occurred())
            return NULL;
    }
    PyObject *stream = PyObject_CallOneArg(l->stream_of, l->device);
    if (stream == NULL)
        return NULL;
    LaunchConfig config = l->config;
    config.hStream = PyLong_AsVoidPtr(stream);
    Py_DECREF(stream);
    if (PyErr_Occurred())
        return NULL;
    return PyLong_FromLong(l->launch(&config, l->function, params, NULL));
}

static PyMethodDef methods[] = {
    {"make", make, METH_VARARGS, "A launcher capsule (see the module's source)."},
    {"launch", (PyCFunction)(void (*)(void))launch, METH_FASTCALL, "launch(launcher, *args) -> CUresult"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fusebench_launch", NULL, -1, methods};

PyMODINIT_FUNC PyInit__fusebench_launch(void) {
    data_ptr_name = PyUnicode_InternFromString("data_ptr");
    if (data_ptr_name == NULL)
        return NULL;
    return PyModule_Create(&module);
}
