# SPDX-License-Identifier: Apache-2.0
"""grex from Python, without torch: collectives on any buffer.

    import grex, array
    with grex.Comm.from_env() as comm:          # under grex-run, torchrun, mpirun or srun
        x = array.array("f", [comm.rank] * 4)
        comm.allreduce(x)                        # in place; x is now the sum over ranks
        print(comm.rank, comm.size, list(x))

Buffers are anything that exports the buffer protocol and is C-contiguous:
array.array, bytearray, memoryview, numpy arrays. The element type comes from
the buffer's format (float32, float64, float16, int32, int64, uint8) or from
`dtype=` ("bf16" for bfloat16 bits held in uint16 storage, for example).
Read-only inputs (bytes) are copied first; outputs must be writable.

This module is a thin layer over the C API (include/grex/grex.h), loaded with
ctypes, so it needs only libgrex. ctypes releases the GIL during every call.
"""
import ctypes
import os

__all__ = ["Comm", "Work", "GrexError", "version", "library_path", "DTYPES", "OPS"]

DTYPES = {"f32": 0, "f64": 1, "i32": 2, "i64": 3, "u8": 4, "f16": 5, "bf16": 6}
OPS = {"sum": 0, "prod": 1, "min": 2, "max": 3, "avg": 4}
_SIZES = {"f32": 4, "f64": 8, "i32": 4, "i64": 8, "u8": 1, "f16": 2, "bf16": 2}


class GrexError(RuntimeError):
    """A grex call failed: `code` is the grex_result_t, `name` its short name."""

    def __init__(self, code, name, message):
        super().__init__(f"grex: {name}: {message}" if message else f"grex: {name}")
        self.code, self.name, self.message = code, name, message


def _candidates():
    env = os.environ.get("GREX_LIBRARY")
    if env:
        yield env
        return
    here = os.path.dirname(os.path.abspath(__file__))
    yield os.path.join(here, "libgrex.so.0")  # a wheel carries the library beside this file
    try:
        from . import _install  # written by `meson install`: where libgrex went
        yield os.path.join(_install.LIBDIR, "libgrex.so.0")
    except ImportError:
        pass
    yield "libgrex.so.0"  # the dynamic loader's own search


def _load():
    tried = []
    for path in _candidates():
        if os.path.isabs(path) and not os.path.exists(path):
            tried.append(path)
            continue
        try:
            # RTLD_GLOBAL: the grex_torch extension, loaded later, then binds to this very copy.
            return ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL), path
        except OSError as e:
            tried.append(f"{path} ({e})")
    raise ImportError("grex: libgrex.so.0 not found; tried " + "; ".join(tried) +
                      ". Set GREX_LIBRARY to its path, or install grex (meson install, pip install .)")


_lib, _path = _load()
_c = ctypes
_p, _sz, _i, _u32 = _c.c_void_p, _c.c_size_t, _c.c_int, _c.c_uint32
for _name, _args in {
    "grex_abi_version": [], "grex_version": [], "grex_strerror": [_i], "grex_last_error_message": [],
    "grex_comm_init_env": [_c.POINTER(_p)],
    "grex_comm_init_rank": [_i, _i, _c.c_char_p, _c.c_char_p, _c.POINTER(_p)],
    "grex_comm_destroy": [_p], "grex_comm_rank": [_p, _c.POINTER(_i)], "grex_comm_size": [_p, _c.POINTER(_i)],
    "grex_allreduce": [_p, _p, _p, _sz, _i, _i], "grex_reduce_scatter": [_p, _p, _p, _sz, _i, _i],
    "grex_allgather": [_p, _p, _p, _sz, _i], "grex_broadcast": [_p, _p, _sz, _i, _i],
    "grex_reduce": [_p, _p, _p, _sz, _i, _i, _i], "grex_alltoall": [_p, _p, _p, _sz, _i],
    "grex_alltoallv": [_p, _p, _c.POINTER(_sz), _c.POINTER(_sz), _p, _c.POINTER(_sz), _c.POINTER(_sz), _i],
    "grex_barrier": [_p], "grex_send": [_p, _p, _sz, _i, _u32], "grex_recv": [_p, _p, _sz, _i, _u32],
    "grex_sendrecv": [_p, _p, _sz, _i, _p, _sz, _i, _u32],
    "grex_recv_any": [_p, _p, _sz, _u32, _c.POINTER(_i)],
    "grex_allreduce_deadline": [_p, _p, _p, _sz, _i, _i, _c.c_int64, _i, _c.POINTER(_i)],
    "grex_iprobe": [_p, _u32, _i, _c.POINTER(_i), _c.POINTER(_i), _c.POINTER(_sz)],
    "grex_allreduce_compressed": [_p, _p, _p, _sz, _i, _i, _i, _i, _p, _p], "grex_clear_feedback": [_p, _p],
    "grex_allreduce_async": [_p, _p, _p, _sz, _i, _i, _c.POINTER(_p)],
    "grex_broadcast_async": [_p, _p, _sz, _i, _i, _c.POINTER(_p)],
    "grex_allgather_async": [_p, _p, _p, _sz, _i, _c.POINTER(_p)],
    "grex_barrier_async": [_p, _c.POINTER(_p)],
    "grex_work_wait": [_p], "grex_work_wait_timeout": [_p, _c.c_int64], "grex_work_test": [_p, _c.POINTER(_i)],
    "grex_work_free": [_p],
}.items():
    _f = getattr(_lib, _name)
    _f.argtypes = _args
    _f.restype = _c.c_char_p if _name in ("grex_version", "grex_strerror", "grex_last_error_message") else \
        (None if _name == "grex_work_free" else _c.c_int)

if _lib.grex_abi_version() != 1:
    raise ImportError(f"grex: {_path} has ABI {_lib.grex_abi_version()}, this module speaks ABI 1")


def version():
    """The loaded library's version, e.g. "0.1.0"."""
    return _lib.grex_version().decode()


def library_path():
    """The libgrex this module loaded."""
    return _path


def _check(rc):
    if rc != 0:
        raise GrexError(rc, _lib.grex_strerror(rc).decode(), _lib.grex_last_error_message().decode())


class _Buf:
    """A C-contiguous buffer: its address, element count and grex dtype."""

    def __init__(self, obj, dtype, writable):
        mv = obj if isinstance(obj, memoryview) else memoryview(obj)
        if not mv.c_contiguous:
            raise ValueError("grex: buffers must be C-contiguous")
        if mv.readonly:
            if writable:
                raise ValueError("grex: this buffer receives data and must be writable")
            mv = memoryview(bytearray(mv.cast("B")))  # read-only input: copy it
        self.dtype = dtype if dtype is not None else _dtype_of(mv)
        if self.dtype not in DTYPES:
            raise ValueError(f"grex: unknown dtype {self.dtype!r} (one of {', '.join(DTYPES)})")
        self.nbytes = mv.nbytes
        if self.nbytes % _SIZES[self.dtype] != 0:
            raise ValueError(f"grex: {self.nbytes} bytes is not a whole number of {self.dtype} elements")
        self.count = self.nbytes // _SIZES[self.dtype]
        self.mv = mv  # keeps any copy alive for the call
        raw = mv.cast("B") if mv.ndim != 1 or mv.format != "B" else mv
        # Holding the ctypes view holds the buffer export: a bytearray cannot
        # be resized (and its memory moved) while the call may still use it.
        self._view = _c.c_char.from_buffer(raw) if self.nbytes > 0 else None
        self.ptr = _c.addressof(self._view) if self._view is not None else None


def _dtype_of(mv):
    fmt = mv.format.lstrip("@=<>!")
    if fmt == "f":
        return "f32"
    if fmt == "d":
        return "f64"
    if fmt == "e":
        return "f16"
    if fmt in ("b", "h", "i", "l", "q", "n") and mv.itemsize in (4, 8):
        return "i32" if mv.itemsize == 4 else "i64"
    if fmt in ("B", "c"):
        return "u8"
    raise ValueError(f"grex: no grex type for buffer format {mv.format!r} (itemsize {mv.itemsize}); pass dtype=")


def _op(op):
    try:
        return OPS[op.lower()]
    except (KeyError, AttributeError):
        raise ValueError(f"grex: unknown op {op!r} (one of {', '.join(OPS)})") from None


class Work:
    """A non-blocking collective in flight: wait(), wait(timeout_s), test()."""

    def __init__(self, handle, keep):
        self._h, self._keep = handle, keep

    def wait(self, timeout_s=None):
        if self._h is None:
            return
        if timeout_s is None:
            rc = _lib.grex_work_wait(self._h)
        else:
            rc = _lib.grex_work_wait_timeout(self._h, int(timeout_s * 1000))
            if rc == 3:  # GREX_ERR_TIMEOUT: still running; the handle stays valid
                _check(rc)
        self._free()
        _check(rc)

    def test(self):
        if self._h is None:
            return True
        done = _i(0)
        _check(_lib.grex_work_test(self._h, _c.byref(done)))
        return bool(done.value)

    def _free(self):
        if self._h is not None:
            _lib.grex_work_free(self._h)
            self._h, self._keep = None, None

    def __del__(self):
        # Never free a collective still in flight (its buffers are in use).
        if self._h is not None and _lib is not None:
            try:
                _lib.grex_work_wait(self._h)
            finally:
                self._free()


class Comm:
    """A grex communicator: every rank of the job holds one."""

    def __init__(self, rank=None, size=None, store=None, token=None):
        """Comm(rank, size, "host:port", token) joins explicitly (rank 0 hosts the store);
        Comm() is Comm.from_env()."""
        h = _p()
        if rank is None:
            _check(_lib.grex_comm_init_env(_c.byref(h)))
        else:
            if size is None or store is None:
                raise ValueError("grex: Comm(rank, size, store, token) needs size and store too")
            _check(_lib.grex_comm_init_rank(int(rank), int(size), store.encode(),
                                            token.encode() if token is not None else None, _c.byref(h)))
        self._h = h
        r, s = _i(), _i()
        _check(_lib.grex_comm_rank(h, _c.byref(r)))
        _check(_lib.grex_comm_size(h, _c.byref(s)))
        self.rank, self.size = r.value, s.value

    @classmethod
    def from_env(cls):
        """Joins the job the environment describes: grex-run, torchrun, Open MPI or Slurm."""
        return cls()

    def close(self):
        if getattr(self, "_h", None):
            _check(_lib.grex_comm_destroy(self._h))
            self._h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        if getattr(self, "_h", None) and _lib is not None:
            _lib.grex_comm_destroy(self._h)
            self._h = None

    def _handle(self):
        if not self._h:
            raise ValueError("grex: the communicator is closed")
        return self._h

    # -- collectives (blocking unless async_op=True) --------------------------------------------
    def allreduce(self, buf, out=None, op="sum", dtype=None, async_op=False, compression=None,
                  error_feedback=False):
        """Reduces over ranks into `out` (default: in place into `buf`).
        compression="bf16", "fp16" or "int8" (float32, sum or avg): the vector
        travels compressed, accumulated in float32 at every hop; error_feedback
        keeps this rank's rounding error per output buffer for the next call."""
        src = _Buf(buf, dtype, writable=out is None)
        dst = _Buf(out, src.dtype, writable=True) if out is not None else src
        if dst.count != src.count:
            raise ValueError(f"grex: allreduce output holds {dst.count} elements, input {src.count}")
        if compression is not None or error_feedback:
            kinds = {None: 0, "none": 0, "bf16": 1, "fp16": 2, "int8": 3, "topk": 4}
            if compression not in kinds:
                raise ValueError(f"grex: compression {compression!r}: use 'bf16', 'fp16', 'int8', 'topk' or None")
            w = _p()
            _check(_lib.grex_allreduce_compressed(self._handle(), src.ptr, dst.ptr, src.count, DTYPES[src.dtype],
                                                  _op(op), kinds[compression], int(bool(error_feedback)), None,
                                                  _c.byref(w) if async_op else None))
            if async_op:
                return Work(w, (src, dst))
            return out if out is not None else buf
        if async_op:
            w = _p()
            _check(_lib.grex_allreduce_async(self._handle(), src.ptr, dst.ptr, src.count, DTYPES[src.dtype],
                                             _op(op), _c.byref(w)))
            return Work(w, (src, dst))
        _check(_lib.grex_allreduce(self._handle(), src.ptr, dst.ptr, src.count, DTYPES[src.dtype], _op(op)))
        return out if out is not None else buf

    def allreduce_deadline(self, buf, deadline_ms, out=None, op="sum", dtype=None, carry=False):
        """Allreduce that waits at most deadline_ms (from this rank's entry)
        for the other ranks: the result is the reduction over the ranks in
        time ("avg" divides by their count), the same on every rank, late
        ones included. carry=True keeps a late rank's vector for its next
        such call (sum or avg). Returns the ranks in time."""
        src = _Buf(buf, dtype, writable=out is None)
        dst = _Buf(out, src.dtype, writable=True) if out is not None else src
        if dst.count != src.count:
            raise ValueError(f"grex: allreduce output holds {dst.count} elements, input {src.count}")
        if not deadline_ms or deadline_ms <= 0:
            raise ValueError(f"grex: deadline_ms {deadline_ms!r} is not a positive number of milliseconds")
        flags = (_i * self.size)()
        _check(_lib.grex_allreduce_deadline(self._handle(), src.ptr, dst.ptr, src.count, DTYPES[src.dtype], _op(op),
                                            int(deadline_ms), int(bool(carry)), flags))
        return [r for r in range(self.size) if flags[r]]

    def broadcast(self, buf, root=0, dtype=None, async_op=False):
        b = _Buf(buf, dtype, writable=True)
        if async_op:
            w = _p()
            _check(_lib.grex_broadcast_async(self._handle(), b.ptr, b.count, DTYPES[b.dtype], int(root),
                                             _c.byref(w)))
            return Work(w, b)
        _check(_lib.grex_broadcast(self._handle(), b.ptr, b.count, DTYPES[b.dtype], int(root)))
        return buf

    def reduce(self, buf, out=None, root=0, op="sum", dtype=None):
        """Reduces onto `root`: into `out` there (default: in place into `buf`)."""
        src = _Buf(buf, dtype, writable=out is None and self.rank == root)
        dst = _Buf(out, src.dtype, writable=True) if out is not None else src
        _check(_lib.grex_reduce(self._handle(), src.ptr, dst.ptr, src.count, DTYPES[src.dtype], _op(op), int(root)))
        return out if out is not None else buf

    def allgather(self, buf, out, dtype=None, async_op=False):
        """`out` holds size x len(buf) elements, in rank order."""
        src = _Buf(buf, dtype, writable=False)
        dst = _Buf(out, src.dtype, writable=True)
        if dst.count != src.count * self.size:
            raise ValueError(f"grex: allgather output holds {dst.count} elements, needs {src.count * self.size}")
        if async_op:
            w = _p()
            _check(_lib.grex_allgather_async(self._handle(), src.ptr, dst.ptr, src.count, DTYPES[src.dtype],
                                             _c.byref(w)))
            return Work(w, (src, dst))
        _check(_lib.grex_allgather(self._handle(), src.ptr, dst.ptr, src.count, DTYPES[src.dtype]))
        return out

    def reduce_scatter(self, buf, out, op="sum", dtype=None):
        """`buf` holds size x len(out) elements; rank r gets the reduction of block r."""
        src = _Buf(buf, dtype, writable=False)
        dst = _Buf(out, src.dtype, writable=True)
        if src.count != dst.count * self.size:
            raise ValueError(f"grex: reduce_scatter input holds {src.count} elements, needs {dst.count * self.size}")
        _check(_lib.grex_reduce_scatter(self._handle(), src.ptr, dst.ptr, dst.count, DTYPES[src.dtype], _op(op)))
        return out

    def alltoall(self, buf, out, dtype=None):
        """Block r of `buf` goes to rank r; block r of `out` came from rank r."""
        src = _Buf(buf, dtype, writable=False)
        dst = _Buf(out, src.dtype, writable=True)
        if src.count != dst.count or src.count % self.size != 0:
            raise ValueError("grex: alltoall buffers must be equal and divide into one block per rank")
        _check(_lib.grex_alltoall(self._handle(), src.ptr, dst.ptr, src.count // self.size, DTYPES[src.dtype]))
        return out

    def alltoallv(self, buf, send_counts, out, recv_counts, send_displs=None, recv_displs=None, dtype=None):
        """Uneven alltoall: send_counts[j] elements go to rank j, recv_counts[i] come from rank i.
        Displacements (elements) default to the counts packed in rank order."""
        src = _Buf(buf, dtype, writable=False)
        dst = _Buf(out, src.dtype, writable=True)

        def arr(vals, what):
            vals = list(vals)
            if len(vals) != self.size or any(v < 0 for v in vals):
                raise ValueError(f"grex: alltoallv {what} needs {self.size} non-negative entries")
            return (_sz * self.size)(*vals)

        def packed(counts):
            out_, at = [], 0
            for n in counts:
                out_.append(at)
                at += n
            return out_
        send_displs = packed(send_counts) if send_displs is None else send_displs
        recv_displs = packed(recv_counts) if recv_displs is None else recv_displs
        if max((d + n for d, n in zip(send_displs, send_counts)), default=0) > src.count:
            raise ValueError("grex: alltoallv send counts reach past the input")
        if max((d + n for d, n in zip(recv_displs, recv_counts)), default=0) > dst.count:
            raise ValueError("grex: alltoallv receive counts reach past the output")
        _check(_lib.grex_alltoallv(self._handle(), src.ptr, arr(send_counts, "send_counts"),
                                   arr(send_displs, "send_displs"), dst.ptr, arr(recv_counts, "recv_counts"),
                                   arr(recv_displs, "recv_displs"), DTYPES[src.dtype]))
        return out

    def barrier(self, async_op=False):
        if async_op:
            w = _p()
            _check(_lib.grex_barrier_async(self._handle(), _c.byref(w)))
            return Work(w, None)
        _check(_lib.grex_barrier(self._handle()))

    def send(self, buf, peer, tag=0):
        b = _Buf(buf, "u8", writable=False)
        _check(_lib.grex_send(self._handle(), b.ptr, b.nbytes, int(peer), int(tag)))

    def recv(self, buf, peer, tag=0):
        b = _Buf(buf, "u8", writable=True)
        _check(_lib.grex_recv(self._handle(), b.ptr, b.nbytes, int(peer), int(tag)))
        return buf

    def recv_any(self, buf, tag=0):
        """Receives buf (its exact size) from whichever rank's message with
        `tag` comes first, and returns that rank (MPI_ANY_SOURCE). Needs
        GREX_P2P_ANY_SOURCE=1 on every rank."""
        b = _Buf(buf, "u8", writable=True)
        src = _i(-1)
        _check(_lib.grex_recv_any(self._handle(), b.ptr, b.nbytes, int(tag), _c.byref(src)))
        return src.value

    def iprobe(self, tag=0, source=-1):
        """(source, nbytes) of a message with `tag` from `source` (-1: any
        rank) waiting to be received, or None (MPI_Iprobe); never waits.
        Needs GREX_P2P_ANY_SOURCE=1 on every rank."""
        found, src, nbytes = _i(0), _i(-1), _sz(0)
        _check(_lib.grex_iprobe(self._handle(), int(tag), int(source), _c.byref(found), _c.byref(src),
                                _c.byref(nbytes)))
        return (src.value, nbytes.value) if found.value else None

    def clear_feedback(self):
        """Drops every error-feedback residual of compressed allreduces."""
        _check(_lib.grex_clear_feedback(self._handle(), None))

    def sendrecv(self, sendbuf, dst, recvbuf, src, tag=0):
        """Sends sendbuf to dst while receiving recvbuf (its exact size) from
        src: a ring of ranks each sending to the next never deadlocks."""
        sb = _Buf(sendbuf, "u8", writable=False)
        rb = _Buf(recvbuf, "u8", writable=True)
        _check(_lib.grex_sendrecv(self._handle(), sb.ptr, sb.nbytes, int(dst), rb.ptr, rb.nbytes, int(src), int(tag)))
        return recvbuf
