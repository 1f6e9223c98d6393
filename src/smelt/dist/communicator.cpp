// Communicators (communicator.hpp): the single-process one, and MPI with a rank-ordered reduction
// (alltoall of slices, each rank sums its slice in rank order, allgather of the sums).
#include "smelt/dist/communicator.hpp"

#include <mpi.h>

#include <algorithm>
#include <cstdlib>

#include <fmt/format.h>

namespace smelt {

namespace {

class LocalComm final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  Status barrier() override { return Status::ok(); }
  Status allreduce_sum(float*, int64_t) override { return Status::ok(); }
  Status allreduce_sum(double*, int64_t) override { return Status::ok(); }
  uint64_t bytes_sent() const override { return 0; }
  [[noreturn]] void abort(int code) override { std::exit(code); }
};

Status mpi_status(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return Status::ok();
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  return Status::error(fmt::format("MPI {}: {}", what, std::string(msg, len)));
}

class MpiComm final : public Communicator {
 public:
  ~MpiComm() override {
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin) MPI_Finalize();
  }
  Status init() {
    int provided = 0;
    if (Status s = mpi_status(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "init"); !s)
      return s;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    return Status::ok();
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Status barrier() override { return mpi_status(MPI_Barrier(MPI_COMM_WORLD), "barrier"); }
  Status allreduce_sum(float* data, int64_t n) override { return reduce(data, n, MPI_FLOAT, scratch_f_); }
  Status allreduce_sum(double* data, int64_t n) override { return reduce(data, n, MPI_DOUBLE, scratch_d_); }
  uint64_t bytes_sent() const override { return bytes_; }
  [[noreturn]] void abort(int code) override {
    MPI_Abort(MPI_COMM_WORLD, code);
    std::exit(code);
  }

 private:
  // Slabs keep every MPI count within int.
  static constexpr int64_t kSlab = 1 << 26;

  template <typename T>
  Status reduce(T* data, int64_t n, MPI_Datatype type, std::vector<T>& scratch) {
    if (size_ == 1) return Status::ok();
    for (int64_t at = 0; at < n; at += kSlab) {
      const int64_t len = std::min(kSlab, n - at);
      if (Status s = reduce_slab(data + at, len, type, scratch); !s) return s;
    }
    return Status::ok();
  }

  template <typename T>
  Status reduce_slab(T* data, int64_t n, MPI_Datatype type, std::vector<T>& scratch) {
    const int R = size_;
    counts_.resize(R), displs_.resize(R), rcounts_.resize(R), rdispls_.resize(R);
    for (int r = 0; r < R; r++) {
      const int64_t b = n * r / R, e = n * (r + 1) / R;
      counts_[r] = (int)(e - b);
      displs_[r] = (int)b;
    }
    const int mine = counts_[rank_];
    for (int r = 0; r < R; r++) rcounts_[r] = mine, rdispls_[r] = r * mine;
    if (scratch.size() < (size_t)R * mine) scratch.resize((size_t)R * mine);
    // 1. Slice r of every rank's buffer goes to rank r.
    if (Status s = mpi_status(MPI_Alltoallv(data, counts_.data(), displs_.data(), type, scratch.data(),
                                            rcounts_.data(), rdispls_.data(), type, MPI_COMM_WORLD),
                              "alltoallv");
        !s)
      return s;
    // 2. My slice, summed in rank order.
    T* out = data + displs_[rank_];
    for (int i = 0; i < mine; i++) {
      T acc = scratch[i];
      for (int r = 1; r < R; r++) acc += scratch[(size_t)r * mine + i];
      out[i] = acc;
    }
    // 3. Every rank gets every slice.
    if (Status s = mpi_status(MPI_Allgatherv(MPI_IN_PLACE, 0, type, data, counts_.data(), displs_.data(), type,
                                             MPI_COMM_WORLD),
                              "allgatherv");
        !s)
      return s;
    bytes_ += 2ull * (uint64_t)(n - mine) * sizeof(T);
    return Status::ok();
  }

  int rank_ = 0, size_ = 1;
  std::vector<int> counts_, displs_, rcounts_, rdispls_;
  std::vector<float> scratch_f_;
  std::vector<double> scratch_d_;
  uint64_t bytes_ = 0;
};

}  // namespace

bool dist_launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MV2_COMM_WORLD_SIZE"})
    if (std::getenv(v)) return true;
  return false;
}

Status dist_create(std::unique_ptr<Communicator>& out) {
  if (!dist_launched_by_mpi()) {
    out = std::make_unique<LocalComm>();
    return Status::ok();
  }
  auto m = std::make_unique<MpiComm>();
  if (Status s = m->init(); !s) return s;
  out = std::move(m);
  return Status::ok();
}

}  // namespace smelt
