// A zero-filled array that is either allocated as a std::vector would be (zeros written: every
// page resident from the start, the heap's free memory reused) or, lazily, as an anonymous private mapping whose pages the kernel backs only as they are first
// written. A model whose frozen base keeps its matrices elsewhere (bf16 or q8_0) keeps one flat
// fp32 buffer in the parameter layout's offsets while only the tensors it writes there (norms,
// embeddings) take physical memory; reading an untouched part gives zeros and takes none either.
// A buffer that is all written anyway is better allocated as usual (it may reuse freed memory).
#pragma once
#include <sys/mman.h>

#include <algorithm>
#include <cstddef>
#include <new>
#include <utility>

namespace smelt {

template <typename T>
class PageBuffer {
 public:
  PageBuffer() = default;
  ~PageBuffer() { release(); }
  PageBuffer(const PageBuffer&) = delete;
  PageBuffer& operator=(const PageBuffer&) = delete;
  PageBuffer(PageBuffer&& o) noexcept
      : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)), mapped_(o.mapped_) {}
  PageBuffer& operator=(PageBuffer&& o) noexcept {
    if (this != &o) {
      release();
      p_ = std::exchange(o.p_, nullptr);
      n_ = std::exchange(o.n_, 0);
      mapped_ = o.mapped_;
    }
    return *this;
  }

  // n zeros (the previous contents released), lazily mapped or allocated and written; throws
  // std::bad_alloc when the memory cannot be had.
  void reset(size_t n, bool lazy) {
    release();
    if (n == 0) return;
    if (lazy) {
      void* m = mmap(nullptr, n * sizeof(T), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (m == MAP_FAILED) throw std::bad_alloc();
      p_ = static_cast<T*>(m);
    } else {
      // (operator new and a fill, as std::vector: malloc + memset would become calloc, which
      // leaves a fresh mapping's pages untouched until their first write)
      p_ = static_cast<T*>(::operator new(n * sizeof(T)));
      std::fill_n(p_, n, T{});
    }
    n_ = n;
    mapped_ = lazy;
  }
  void release() {
    if (p_ && mapped_) munmap(p_, n_ * sizeof(T));
    else if (p_) ::operator delete(p_);
    p_ = nullptr;
    n_ = 0;
  }

  T* data() { return p_; }
  const T* data() const { return p_; }
  size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  T* begin() { return p_; }
  T* end() { return p_ + n_; }
  const T* begin() const { return p_; }
  const T* end() const { return p_ + n_; }
  T& operator[](size_t i) { return p_[i]; }
  const T& operator[](size_t i) const { return p_[i]; }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
  bool mapped_ = false;
};

}  // namespace smelt
