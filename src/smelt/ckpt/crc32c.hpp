// CRC32C (Castagnoli, iSCSI polynomial 0x1EDC6F41, RFC 3720): the checksum of every checkpoint file
// and tensor. SSE4.2 crc32 instruction when the CPU has it, slicing-by-8 tables otherwise.
// Not a cryptographic hash and not xxh3 (common/hash.hpp, used for ids and dedup).
#pragma once
#include <cstddef>
#include <cstdint>

namespace smelt {

// Streaming: start from 0 and feed the previous result back in;
// crc32c_update(crc32c_update(0, a, na), b, nb) == CRC32C of a followed by b.
// crc32c_update(0, "123456789", 9) == 0xE3069283.
uint32_t crc32c_update(uint32_t crc, const void* data, size_t n);

// CRC32C of A followed by B from crc_a = CRC32C(A), crc_b = CRC32C(B) and len_b = |B| (zlib's
// crc32_combine method, GF(2) polynomial arithmetic): O(log len_b), independent of the data.
uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);

// Copies n bytes from src to dst (not overlapping) and returns crc32c_update(crc, src, n), reading
// src once: the copy into the checkpoint writer's buffers and its checksum in one pass.
uint32_t crc32c_copy(uint32_t crc, void* dst, const void* src, size_t n);

// The two implementations, for tests and benchmarks. crc32c_update_hw needs crc32c_hw_available().
uint32_t crc32c_update_sw(uint32_t crc, const void* data, size_t n);
uint32_t crc32c_update_hw(uint32_t crc, const void* data, size_t n);
uint32_t crc32c_copy_hw(uint32_t crc, void* dst, const void* src, size_t n);
bool crc32c_hw_available();

}  // namespace smelt
