#!/usr/bin/env python3
"""Write the seed corpus of fuzz-gguf into tests/fuzz/corpus-gguf/.

Seeds: small valid files that use every value type, array type and tensor
type the reader accepts (so the fuzzer starts from inputs that get past the
header), plus the real headers of two fixtures cut at their data section.
Run from the top of the tree: python3 tests/fuzz/gen-corpus-gguf.py
"""
import os
import struct

OUT = "tests/fuzz/corpus-gguf"
U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
FMT = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f",
       BOOL: "<?", U64: "<Q", I64: "<q", F64: "<d"}
# ggml type id -> (block elements, block bytes)
TYPES = {0: (1, 4), 1: (1, 2), 30: (1, 2), 8: (32, 34), 12: (256, 144), 13: (256, 176), 14: (256, 210)}


def s(text):
    b = text.encode()
    return struct.pack("<Q", len(b)) + b


def value(t, v):
    if t == STR:
        return s(v)
    if t == ARR:
        et, items = v
        return struct.pack("<IQ", et, len(items)) + b"".join(value(et, x) for x in items)
    return struct.pack(FMT[t], v)


def gguf(kvs, tensors, version=3, align=32):
    """kvs: [(key, type, value)]; tensors: [(name, type id, dims)]."""
    head = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs))
    head += b"".join(s(k) + struct.pack("<I", t) + value(t, v) for k, t, v in kvs)
    infos, data = b"", b""
    for i, (name, tid, dims) in enumerate(tensors):
        elems, nbytes = TYPES[tid]
        rows = 1
        for d in dims[1:]:
            rows *= d
        size = dims[0] // elems * nbytes * rows
        infos += s(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        infos += struct.pack("<IQ", tid, len(data))
        data += bytes((i * 37 + j) % 251 for j in range(size))
        data += b"\0" * (-len(data) % align)
    head += infos
    return head + b"\0" * (-len(head) % align) + data


def write(name, blob):
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(blob)


def real_metadata_small_tensors(fixture):
    """The fixture's own key-values with only its 1-D tensors (the norms)."""
    with open(os.path.join("tests/data/models", fixture), "rb") as f:
        b = f.read()
    n_t, n_kv = struct.unpack_from("<QQ", b, 8)
    sizes = {U8: 1, I8: 1, U16: 2, I16: 2, U32: 4, I32: 4, F32: 4, BOOL: 1, U64: 8, I64: 8, F64: 8}

    def skip(pos, t):
        if t == STR:
            return pos + 8 + struct.unpack_from("<Q", b, pos)[0]
        if t == ARR:
            et, n = struct.unpack_from("<IQ", b, pos)
            pos += 12
            for _ in range(n):
                pos = skip(pos, et)
            return pos
        return pos + sizes[t]

    pos = 24
    for _ in range(n_kv):
        pos += 8 + struct.unpack_from("<Q", b, pos)[0]
        pos = skip(pos + 4, struct.unpack_from("<I", b, pos)[0])
    kv_bytes, infos, data, chosen = b[24:pos], b"", b"", 0
    tensors = []
    for _ in range(n_t):
        start = pos
        pos += 8 + struct.unpack_from("<Q", b, pos)[0]
        nd = struct.unpack_from("<I", b, pos)[0]
        dims = struct.unpack_from("<%dQ" % nd, b, pos + 4)
        tid, off = struct.unpack_from("<IQ", b, pos + 4 + 8 * nd)
        pos += 4 + 8 * nd + 12
        tensors.append((b[start:pos - 8], nd, tid, off, dims))
    data_start = pos + (-pos % 32)
    for info, nd, tid, off, dims in tensors:
        if nd != 1 or tid != 0:
            continue
        infos += info + struct.pack("<Q", len(data))
        data += b[data_start + off:data_start + off + 4 * dims[0]]
        data += b"\0" * (-len(data) % 32)
        chosen += 1
    head = b"GGUF" + struct.pack("<IQQ", 3, chosen, n_kv) + kv_bytes + infos
    return head + b"\0" * (-len(head) % 32) + data


def main():
    os.makedirs(OUT, exist_ok=True)
    write("empty-v3.gguf", gguf([], []))
    scalars = [("t.u8", U8, 200), ("t.i8", I8, -100), ("t.u16", U16, 60000), ("t.i16", I16, -30000),
               ("t.u32", U32, 4000000000), ("t.i32", I32, -2000000000), ("t.f32", F32, 1.5),
               ("t.bool", BOOL, True), ("t.str", STR, "llama"), ("t.u64", U64, 2**63),
               ("t.i64", I64, -2**62), ("t.f64", F64, 1e300)]
    arrays = [("a." + k[2:], ARR, (t, [v, v])) for k, t, v in scalars]
    write("all-types-v2.gguf", gguf(scalars + arrays + [("a.empty", ARR, (U32, []))], [], version=2))
    tensors = [("f32", 0, [4]), ("f16", 1, [8, 2]), ("bf16", 30, [2, 2, 2]), ("q8_0", 8, [32, 3]),
               ("q4_K", 12, [256, 1, 2]), ("q5_K", 13, [256]), ("q6_K", 14, [256, 1, 1, 2])]
    meta = [("general.architecture", STR, "llama"), ("general.alignment", U32, 64),
            ("tokenizer.ggml.tokens", ARR, (STR, ["<unk>", "<s>", "</s>", "a", "b"]))]
    write("tensors-align64.gguf", gguf(meta, tensors, align=64))
    write("one-tensor.gguf", gguf([("llama.block_count", U32, 1)], [("w", 0, [1])]))
    write("stories260K-norms.gguf", real_metadata_small_tensors("stories260K.gguf"))
    for fixture, cut in (("stories260K.gguf", 14176), ("tinystories-656k-q8_0.gguf", 50336)):
        with open(os.path.join("tests/data/models", fixture), "rb") as f:
            write(fixture.replace(".gguf", "-header.gguf"), f.read(cut))


main()
