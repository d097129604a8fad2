# SPDX-License-Identifier: Apache-2.0
"""The grex Python package on every rank of a job (run under grex-run):
each collective against values computed here, async work, argument errors
raised before any call, and a library error carried up as GrexError.
Prints "PASS grex on N ranks" on rank 0."""
import array
import os
import sys

import grex


def expect(cond, what):
    if not cond:
        raise AssertionError(what)


def main():
    with grex.Comm.from_env() as c:
        r, n = c.rank, c.size
        # allreduce in place, f32 sum; out of place, i64 max; f64 avg
        x = array.array("f", [r + 1.0] * 7)
        c.allreduce(x)
        expect(list(x) == [n * (n + 1) / 2] * 7, f"allreduce f32 sum: {list(x)}")
        src, dst = array.array("q", [r * 10 + k for k in range(5)]), array.array("q", [0] * 5)
        c.allreduce(src, dst, op="max")
        expect(list(dst) == [(n - 1) * 10 + k for k in range(5)], f"allreduce i64 max: {list(dst)}")
        expect(list(src) == [r * 10 + k for k in range(5)], "allreduce out of place changed its input")
        d = array.array("d", [float(r)] * 3)
        c.allreduce(d, op="avg")
        expect(list(d) == [(n - 1) / 2] * 3, f"allreduce f64 avg: {list(d)}")
        # read-only input (bytes) is copied; u8 min
        out = bytearray(4)
        c.allreduce(bytes([r + 5] * 4), out, op="min")
        expect(out == bytearray([5] * 4), f"allreduce u8 min: {out}")
        # broadcast from the last rank
        b = bytearray(b"from-last" if r == n - 1 else bytes(9))
        c.broadcast(b, root=n - 1)
        expect(b == bytearray(b"from-last"), f"broadcast: {b}")
        # allgather, reduce_scatter, alltoall, reduce
        g = array.array("i", [0] * (3 * n))
        c.allgather(array.array("i", [r] * 3), g)
        expect(list(g) == [k for k in range(n) for _ in range(3)], f"allgather: {list(g)}")
        rs_out = array.array("i", [0] * 2)
        c.reduce_scatter(array.array("i", list(range(2 * n))), rs_out)
        expect(list(rs_out) == [n * (2 * r), n * (2 * r + 1)], f"reduce_scatter: {list(rs_out)}")
        a_out = array.array("i", [0] * n)
        c.alltoall(array.array("i", [r * 100 + k for k in range(n)]), a_out)
        expect(list(a_out) == [k * 100 + r for k in range(n)], f"alltoall: {list(a_out)}")
        # alltoallv: rank r sends r + j + 1 elements to rank j, packed in rank order
        sc = [r + j + 1 for j in range(n)]
        rc = [j + r + 1 for j in range(n)]
        v_in = array.array("i", [r * 100 + j for j in range(n) for _ in range(sc[j])])
        v_out = array.array("i", [-1] * sum(rc))
        c.alltoallv(v_in, sc, v_out, rc)
        expect(list(v_out) == [j * 100 + r for j in range(n) for _ in range(rc[j])], f"alltoallv: {list(v_out)}")
        red = array.array("f", [2.0] * 3)
        c.reduce(red, root=0, op="prod")
        if r == 0:
            expect(list(red) == [2.0 ** n] * 3, f"reduce prod: {list(red)}")
        # deadline allreduce, every rank in time: every rank contributes
        dl = array.array("i", [r + 1] * 5)
        inn = c.allreduce_deadline(dl, deadline_ms=20000)
        expect(inn == list(range(n)) and list(dl) == [n * (n + 1) // 2] * 5, f"deadline allreduce: {inn} {list(dl)}")
        # compressed allreduce: small integers are exact in bf16
        cz = array.array("f", [float(r + i % 5) for i in range(1000)])
        c.allreduce(cz, compression="bf16", error_feedback=True)
        expect(list(cz) == [float(n * (n - 1) // 2 + n * (i % 5)) for i in range(1000)], "bf16 allreduce")
        c.clear_feedback()
        # send / recv around a ring
        if n > 1:
            msg = bytearray(16)
            if r % 2 == 0:
                c.send(bytes([r] * 16), (r + 1) % n, tag=3)
                c.recv(msg, (r - 1) % n, tag=3)
            else:
                c.recv(msg, (r - 1) % n, tag=3)
                c.send(bytes([r] * 16), (r + 1) % n, tag=3)
            expect(msg == bytearray([(r - 1) % n] * 16), f"recv: {msg}")
            ring = bytearray(3 << 20)  # chunked: each rank streams while it receives
            c.sendrecv(bytes([r + 1] * (3 << 20)), (r + 1) % n, ring, (r - 1) % n, tag=4)
            expect(ring == bytearray([(r - 1) % n + 1] * (3 << 20)), "sendrecv around the ring")
            # receives from any source (python_test.sh ranks_3 sets GREX_P2P_ANY_SOURCE=1)
            if os.environ.get("GREX_P2P_ANY_SOURCE") == "1":
                if r != 0:
                    c.send(bytes([r] * 8), 0, tag=6)
                else:
                    got = set()
                    for _ in range(n - 1):
                        m = bytearray(8)
                        s = c.recv_any(m, tag=6)
                        expect(m == bytearray([s] * 8) and s not in got, f"recv_any from {s}: {m}")
                        got.add(s)
                    expect(c.iprobe(tag=6) is None, "iprobe after every message was taken")
                c.barrier()
        # several async allreduces in flight, waited in reverse order
        bufs = [array.array("f", [float(i + r)] * 1000) for i in range(4)]
        works = [c.allreduce(buf, async_op=True) for buf in bufs]
        for w in reversed(works):
            w.wait(timeout_s=30)
        for i, buf in enumerate(bufs):
            expect(buf[0] == n * i + n * (n - 1) / 2 and buf[999] == buf[0], f"async allreduce {i}: {buf[0]}")
        expect(all(w.test() for w in works), "waited work not done")
        c.barrier(async_op=True).wait()
        # A buffer in use by an async call stays exported: it cannot be resized (moved).
        grow = bytearray(4096)
        w = c.allreduce(grow, op="max", async_op=True)
        try:
            grow.extend(b"x")
        except BufferError:
            pass
        else:
            raise AssertionError("a bytearray in use by an async allreduce could be resized")
        w.wait()
        grow.extend(b"x")  # released once waited
        # numpy arrays, where numpy is installed
        try:
            import numpy as np
        except ImportError:
            np = None
        if np is not None:
            h = np.full((2, 3), r + 1, dtype=np.float16)
            c.allreduce(h)
            expect(bool((h == n * (n + 1) / 2).all()), f"numpy f16: {h}")
        # argument errors: raised here, before any rank calls into the library
        for bad, kind in ((lambda: c.allreduce(array.array("h", [1])), ValueError),        # int16: no grex type
                          (lambda: c.allreduce(x, array.array("f", [0.0])), ValueError),  # output too small
                          (lambda: c.allreduce(bytes(4)), ValueError),                    # in place into bytes
                          (lambda: c.allreduce(x, op="mean"), ValueError),
                          (lambda: c.allgather(x, array.array("f", [0.0])), ValueError)):
            try:
                bad()
            except kind:
                pass
            else:
                raise AssertionError("no error for a bad argument")
        # a library error: a peer rank that does not exist
        try:
            c.send(b"x", n + 5)
        except grex.GrexError as e:
            expect(e.name == "invalid-argument" or e.code == 1, f"bad peer gave {e.code} {e.name}: {e}")
        else:
            raise AssertionError("send to a missing rank did not fail")
        c.barrier()
        if r == 0:
            print(f"PASS grex on {n} ranks (library {grex.library_path()}, version {grex.version()})")
    try:
        c.barrier()
    except ValueError:
        pass
    else:
        raise AssertionError("a closed communicator was usable")


if __name__ == "__main__":
    sys.exit(main())
