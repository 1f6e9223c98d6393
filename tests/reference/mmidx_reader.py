#!/usr/bin/python3
"""Independent reader of Megatron-LM MMIDIDX token shards (PREFIX.idx + PREFIX.bin), for tests.

Written from the format description alone (docs/dataset.md), with numpy; shares no code with Smelt.
Prints every field as one JSON object on stdout; exits 1 with a message on stderr when the files
do not follow the format.

usage: mmidx_reader.py PREFIX [--no-tokens]
"""
import json
import os
import struct
import sys

import numpy as np

MAGIC = b"MMIDIDX\x00\x00"
DTYPES = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64,
          6: np.float64, 7: np.float32, 8: np.uint16}


def fail(msg):
    sys.stderr.write("mmidx_reader: " + msg + "\n")
    sys.exit(1)


def read(prefix, with_tokens):
    idx_path, bin_path = prefix + ".idx", prefix + ".bin"
    with open(idx_path, "rb") as f:
        raw = f.read()
    if len(raw) < 34:
        fail("%s: %d bytes, shorter than the header" % (idx_path, len(raw)))
    if raw[:9] != MAGIC:
        fail("%s: bad magic %r" % (idx_path, raw[:9]))
    (version,) = struct.unpack_from("<Q", raw, 9)
    (code,) = struct.unpack_from("<B", raw, 17)
    seq_count, doc_count = struct.unpack_from("<QQ", raw, 18)
    if version != 1:
        fail("%s: version %d" % (idx_path, version))
    if code not in DTYPES:
        fail("%s: unknown dtype code %d" % (idx_path, code))
    dtype = np.dtype(DTYPES[code]).newbyteorder("<")
    expected = 34 + 4 * seq_count + 8 * seq_count + 8 * doc_count
    if len(raw) != expected:
        fail("%s: %d bytes, the counts say %d" % (idx_path, len(raw), expected))
    off = 34
    lengths = np.frombuffer(raw, dtype="<i4", count=seq_count, offset=off)
    off += 4 * seq_count
    pointers = np.frombuffer(raw, dtype="<i8", count=seq_count, offset=off)
    off += 8 * seq_count
    doc_idx = np.frombuffer(raw, dtype="<i8", count=doc_count, offset=off)

    bin_size = os.path.getsize(bin_path)
    if doc_count < 1 or doc_idx[0] != 0 or doc_idx[-1] != seq_count:
        fail("%s: document_indices must run from 0 to the sequence count" % idx_path)
    if np.any(np.diff(doc_idx) < 0):
        fail("%s: document_indices decrease" % idx_path)
    if np.any(lengths < 0):
        fail("%s: negative sequence length" % idx_path)
    ends = pointers.astype(np.int64) + lengths.astype(np.int64) * dtype.itemsize
    if seq_count and (np.any(pointers < 0) or ends.max() > bin_size):
        fail("%s: a sequence lies outside %s (%d bytes)" % (idx_path, bin_path, bin_size))

    out = {
        "version": int(version),
        "dtype_code": int(code),
        "dtype": np.dtype(DTYPES[code]).name,
        "itemsize": dtype.itemsize,
        "sequence_count": int(seq_count),
        "document_count": int(doc_count),
        "sequence_lengths": lengths.tolist(),
        "sequence_pointers": pointers.tolist(),
        "document_indices": doc_idx.tolist(),
        "bin_bytes": bin_size,
        "total_tokens": int(lengths.astype(np.int64).sum()) if seq_count else 0,
    }
    if with_tokens:
        data = np.memmap(bin_path, dtype=dtype, mode="r") if bin_size else np.zeros(0, dtype)
        toks = []
        for p, n in zip(pointers.tolist(), lengths.tolist()):
            start = p // dtype.itemsize
            toks.append(np.asarray(data[start:start + n]).astype(np.int64).tolist())
        out["tokens"] = toks
    return out


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if len(args) != 1:
        fail("usage: mmidx_reader.py PREFIX [--no-tokens]")
    json.dump(read(args[0], "--no-tokens" not in sys.argv), sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
