#!/usr/bin/python3
# Independent safetensors reader, written from the format description
# (https://github.com/huggingface/safetensors#format), not the safetensors package: checks the header
# (length, JSON, 8-byte aligned data start, offsets covering the data with no hole or overlap) and
# prints {"metadata": {...}, "tensors": {name: {"dtype", "shape", "values"}}} as JSON.
# Usage: safetensors_read.py FILE
import json
import struct
import sys

import numpy as np

DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32,
          "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}


def read(path):
    """(metadata, {name: (dtype name, numpy array of its shape)}), the header checked."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    assert 8 + n <= len(blob), f"header length {n} beyond file size {len(blob)}"
    assert (8 + n) % 8 == 0, f"data start {8 + n} not 8-byte aligned"
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    data = blob[8 + n:]
    meta = header.pop("__metadata__", {})
    assert all(isinstance(v, str) for v in meta.values()), "metadata values must be strings"
    spans, out = [], {}
    for name, e in header.items():
        dt = np.dtype(DTYPES[e["dtype"]]).newbyteorder("<")
        b, end = e["data_offsets"]
        count = int(np.prod(e["shape"])) if e["shape"] else 1
        assert end - b == count * dt.itemsize, f"{name}: {end - b} bytes for shape {e['shape']}"
        arr = np.frombuffer(data[b:end], dtype=dt).reshape(e["shape"])
        spans.append((b, end))
        out[name] = (e["dtype"], arr)
    pos = 0
    for b, end in sorted(spans):
        assert b == pos, f"hole or overlap at data byte {pos}"
        pos = end
    assert pos == len(data), f"data ends at {pos}, buffer has {len(data)} bytes"
    return meta, out


def main(path):
    meta, tensors = read(path)
    out = {name: {"dtype": dt, "shape": list(arr.shape), "values": arr.astype(np.float64).ravel().tolist()}
           for name, (dt, arr) in tensors.items()}
    json.dump({"metadata": meta, "tensors": out}, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1])
