// Communicators (communicator.hpp): the single-process one, and MPI with a rank-ordered reduction
// (alltoall of slices, each rank sums its slice in rank order, allgather of the sums).
#include "smelt/dist/communicator.hpp"

#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <chrono>
#include <cstdlib>
#include <thread>

#include <fmt/format.h>

namespace smelt {

namespace {

class LocalComm final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  int nodes() const override { return 1; }
  const char* algorithm() const override { return "local"; }
  Status barrier() override { return Status::ok(); }
  Status allreduce_sum(float*, int64_t) override { return Status::ok(); }
  Status allreduce_sum(double*, int64_t) override { return Status::ok(); }
  uint64_t bytes_sent() const override { return 0; }
  [[noreturn]] void abort(int code) override { std::exit(code); }
  Status allgather_sparse(const int64_t* idx, const float* val, int count, std::vector<int64_t>& all_idx,
                          std::vector<float>& all_val, std::vector<int>& counts) override {
    all_idx.assign(idx, idx + count);
    all_val.assign(val, val + count);
    counts.assign(1, count);
    return Status::ok();
  }
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
    for (MPI_Comm* c : {&node_, &column_})
      if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin) MPI_Finalize();
  }
  Status init(const DistConfig& c) {
    int provided = 0;
    if (Status s = mpi_status(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "init"); !s)
      return s;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    timeout_s_ = c.timeout_s;
    if (c.allreduce != "hierarchical") return Status::ok();
    // Nodes: consecutive blocks of ranks_per_node, or the ranks sharing memory.
    if (c.ranks_per_node > 0) {
      if (size_ % c.ranks_per_node != 0)
        return Status::error(fmt::format("[dist] ranks_per_node = {}: must divide the {} ranks", c.ranks_per_node, size_));
      MPI_Comm_split(MPI_COMM_WORLD, rank_ / c.ranks_per_node, rank_, &node_);
    } else {
      MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node_);
    }
    int local = 0, local_size = 0, node_id = 0, lo = 0, hi = 0;
    MPI_Comm_rank(node_, &local);
    MPI_Comm_size(node_, &local_size);
    MPI_Allreduce(&rank_, &node_id, 1, MPI_INT, MPI_MIN, node_);  // a node is named by its first rank
    MPI_Allreduce(&local_size, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&local_size, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (lo != hi)
      return Status::error(fmt::format("[dist] allreduce = \"hierarchical\" needs nodes of equal size; here they hold "
                                       "{} to {} ranks (set dist.ranks_per_node or use \"flat\")", lo, hi));
    // The ranks holding the same slice on every node, ordered by node.
    MPI_Comm_split(MPI_COMM_WORLD, local, node_id, &column_);
    MPI_Comm_size(column_, &nodes_);
    hierarchical_ = true;
    return Status::ok();
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int nodes() const override { return hierarchical_ ? nodes_ : 1; }
  const char* algorithm() const override { return hierarchical_ ? "hierarchical" : "flat"; }
  Status barrier() override {
    MPI_Request req;
    if (Status s = mpi_status(MPI_Ibarrier(MPI_COMM_WORLD, &req), "barrier"); !s) return s;
    return wait(req, "barrier");
  }
  Status allreduce_sum(float* data, int64_t n) override {
    return hierarchical_ ? reduce_hier(data, n, MPI_FLOAT, scratch_f_) : reduce(MPI_COMM_WORLD, data, n, MPI_FLOAT, scratch_f_);
  }
  Status allreduce_sum(double* data, int64_t n) override {
    return reduce(MPI_COMM_WORLD, data, n, MPI_DOUBLE, scratch_d_);
  }
  uint64_t bytes_sent() const override { return bytes_; }
  Status allgather_sparse(const int64_t* idx, const float* val, int count, std::vector<int64_t>& all_idx,
                          std::vector<float>& all_val, std::vector<int>& counts) override {
    counts.resize(size_);
    MPI_Request req;
    if (Status s = mpi_status(MPI_Iallgather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, MPI_COMM_WORLD, &req),
                              "allgather");
        !s)
      return s;
    if (Status s = wait(req, "sparse all-gather (counts)"); !s) return s;
    std::vector<int>& displs = displs_;
    displs.resize(size_);
    int64_t total = 0;
    for (int r = 0; r < size_; r++) displs[r] = (int)total, total += counts[r];
    all_idx.resize(total);
    all_val.resize(total);
    if (Status s = mpi_status(MPI_Iallgatherv(idx, count, MPI_INT64_T, all_idx.data(), counts.data(), displs.data(),
                                              MPI_INT64_T, MPI_COMM_WORLD, &req),
                              "allgatherv");
        !s)
      return s;
    if (Status s = wait(req, "sparse all-gather (indices)"); !s) return s;
    if (Status s = mpi_status(MPI_Iallgatherv(val, count, MPI_FLOAT, all_val.data(), counts.data(), displs.data(),
                                              MPI_FLOAT, MPI_COMM_WORLD, &req),
                              "allgatherv");
        !s)
      return s;
    if (Status s = wait(req, "sparse all-gather (values)"); !s) return s;
    bytes_ += (uint64_t)count * (sizeof(int64_t) + sizeof(float)) * (size_ - 1);
    return Status::ok();
  }
  [[noreturn]] void abort(int code) override {
    MPI_Abort(MPI_COMM_WORLD, code);
    std::exit(code);
  }

 private:
  // Slabs keep every MPI count within int.
  static constexpr int64_t kSlab = 1 << 26;

  // Rank-ordered all-reduce over comm, in slabs.
  template <typename T>
  Status reduce(MPI_Comm comm, T* data, int64_t n, MPI_Datatype type, std::vector<T>& scratch) {
    int R = 1;
    MPI_Comm_size(comm, &R);
    if (R == 1) return Status::ok();
    for (int64_t at = 0; at < n; at += kSlab) {
      const int64_t len = std::min(kSlab, n - at);
      int64_t off = 0, mine = 0;
      if (Status s = scatter_sum(comm, data + at, len, type, scratch, off, mine); !s) return s;
      if (Status s = gather(comm, data + at, len, type); !s) return s;
    }
    return Status::ok();
  }

  // Node reduce-scatter, slice all-reduce across nodes, node all-gather (slab by slab).
  template <typename T>
  Status reduce_hier(T* data, int64_t n, MPI_Datatype type, std::vector<T>& scratch) {
    if (size_ == 1) return Status::ok();
    for (int64_t at = 0; at < n; at += kSlab) {
      const int64_t len = std::min(kSlab, n - at);
      int64_t off = 0, mine = 0;
      int local_size = 1;
      MPI_Comm_size(node_, &local_size);
      if (local_size > 1) {
        if (Status s = scatter_sum(node_, data + at, len, type, scratch, off, mine); !s) return s;
      } else {
        off = 0, mine = len;
      }
      if (Status s = reduce(column_, data + at + off, mine, type, scratch); !s) return s;
      if (local_size > 1)
        if (Status s = gather(node_, data + at, len, type); !s) return s;
    }
    return Status::ok();
  }

  void slices(MPI_Comm comm, int64_t n, int& R, int& me) {
    MPI_Comm_size(comm, &R);
    MPI_Comm_rank(comm, &me);
    counts_.resize(R), displs_.resize(R);
    for (int r = 0; r < R; r++) {
      const int64_t b = n * r / R, e = n * (r + 1) / R;
      counts_[r] = (int)(e - b);
      displs_[r] = (int)b;
    }
  }

  // Slice r of every member's buffer goes to member r, which sums its slice in member order.
  template <typename T>
  Status scatter_sum(MPI_Comm comm, T* data, int64_t n, MPI_Datatype type, std::vector<T>& scratch, int64_t& off,
                     int64_t& mine_out) {
    int R = 1, me = 0;
    slices(comm, n, R, me);
    const int mine = counts_[me];
    rcounts_.resize(R), rdispls_.resize(R);
    for (int r = 0; r < R; r++) rcounts_[r] = mine, rdispls_[r] = r * mine;
    if (scratch.size() < (size_t)R * mine) scratch.resize((size_t)R * mine);
    MPI_Request req;
    if (Status s = mpi_status(MPI_Ialltoallv(data, counts_.data(), displs_.data(), type, scratch.data(),
                                             rcounts_.data(), rdispls_.data(), type, comm, &req),
                              "alltoallv");
        !s)
      return s;
    if (Status s = wait(req, "all-reduce (alltoallv)"); !s) return s;
    T* out = data + displs_[me];
    for (int i = 0; i < mine; i++) {
      T acc = scratch[i];
      for (int r = 1; r < R; r++) acc += scratch[(size_t)r * mine + i];
      out[i] = acc;
    }
    bytes_ += (uint64_t)(n - mine) * sizeof(T);
    off = displs_[me];
    mine_out = mine;
    return Status::ok();
  }

  template <typename T>
  Status gather(MPI_Comm comm, T* data, int64_t n, MPI_Datatype type) {
    int R = 1, me = 0;
    slices(comm, n, R, me);
    bytes_ += (uint64_t)counts_[me] * (R - 1) * sizeof(T);
    MPI_Request req;
    if (Status s = mpi_status(MPI_Iallgatherv(MPI_IN_PLACE, 0, type, data, counts_.data(), displs_.data(), type,
                                              comm, &req),
                              "allgatherv");
        !s)
      return s;
    return wait(req, "all-reduce (allgatherv)");
  }

  // Polls a non-blocking collective; past the timeout the job is ended (some rank stopped
  // responding: a blocking call would wait forever).
  Status wait(MPI_Request& req, const char* what) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int spins = 0;; spins++) {
      int done = 0;
      if (Status s = mpi_status(MPI_Test(&req, &done, MPI_STATUS_IGNORE), what); !s) return s;
      if (done) return Status::ok();
      if (spins > 1000) std::this_thread::sleep_for(std::chrono::microseconds(50));
      const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (timeout_s_ > 0 && waited > timeout_s_) {
        std::fprintf(stderr,
                     "[dist] rank %d of %d: %s waited %.0f s for the other ranks ([dist] timeout_s = %g); a rank is "
                     "hung or gone: ending the job (relaunch with --resume)\n",
                     rank_, size_, what, waited, timeout_s_);
        MPI_Abort(MPI_COMM_WORLD, 1);
      }
    }
  }

  int rank_ = 0, size_ = 1, nodes_ = 1;
  double timeout_s_ = 600;
  bool hierarchical_ = false;
  MPI_Comm node_ = MPI_COMM_NULL, column_ = MPI_COMM_NULL;
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

Status dist_config_validate(const DistConfig& c) {
  if (c.allreduce != "flat" && c.allreduce != "hierarchical")
    return Status::error(fmt::format("[dist] allreduce = \"{}\": allowed are \"flat\" and \"hierarchical\"", c.allreduce));
  if (!(c.timeout_s >= 0))
    return Status::error(fmt::format("[dist] timeout_s = {}: must be >= 0 (0: wait forever)", c.timeout_s));
  if (c.compression != "none" && c.compression != "topk")
    return Status::error(fmt::format("[dist.compression] type = \"{}\": allowed are \"none\" and \"topk\"", c.compression));
  if (!(c.topk_ratio > 0 && c.topk_ratio <= 1))
    return Status::error(fmt::format("[dist.compression] ratio = {}: must be in (0, 1]", c.topk_ratio));
  if (c.ranks_per_node < 0)
    return Status::error(fmt::format("[dist] ranks_per_node = {}: must be >= 0 (0: ranks sharing memory)", c.ranks_per_node));
  return Status::ok();
}

Status dist_create(const DistConfig& c, std::unique_ptr<Communicator>& out) {
  if (Status s = dist_config_validate(c); !s) return s;
  if (!dist_launched_by_mpi()) {
    out = std::make_unique<LocalComm>();
    return Status::ok();
  }
  auto m = std::make_unique<MpiComm>();
  if (Status s = m->init(c); !s) return s;
  out = std::move(m);
  return Status::ok();
}

}  // namespace smelt
