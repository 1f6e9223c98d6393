// Communicators (communicator.hpp): the single-process one, and MPI with a rank-ordered reduction
// (alltoall of slices, each rank sums its slice in rank order, allgather of the sums).
#include "smelt/dist/communicator.hpp"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "smelt/obs/trace.hpp"

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
  Status allreduce_max(float*, int64_t) override { return Status::ok(); }
  uint64_t bytes_sent() const override { return 0; }
  // No queue to itself: one process is one pipeline stage, which has no neighbour to talk to.
  Status send_async(const float*, int64_t, int peer, int) override { return no_peer("send_async to", peer); }
  Status recv(float*, int64_t, int peer, int) override { return no_peer("recv from", peer); }
  Status wait_sends() override { return Status::ok(); }  // nothing was started
  void progress() override {}
  double take_recv_wait_ms() override { return 0; }
  [[noreturn]] void abort(int code) override { std::exit(code); }
  Status allgather_sparse(const int64_t* idx, const float* val, int count, std::vector<int64_t>& all_idx,
                          std::vector<float>& all_val, std::vector<int>& counts) override {
    all_idx.assign(idx, idx + count);
    all_val.assign(val, val + count);
    counts.assign(1, count);
    return Status::ok();
  }
  Status reduce_scatter_sum(float*, int64_t, int64_t, const std::vector<int64_t>&) override { return Status::ok(); }
  Status allgather_ranges(float*, const std::vector<int64_t>&) override { return Status::ok(); }
  void sum_async(float*, int64_t, int64_t, const std::vector<int64_t>*) override {}
  Status wait_async(double* busy_ms) override {
    if (busy_ms) *busy_ms = 0;
    return Status::ok();
  }
  void arrive(int64_t) override {}
  Status split(int, int, std::unique_ptr<Communicator>& out) override {
    out = std::make_unique<LocalComm>();
    return Status::ok();
  }

 private:
  static Status no_peer(const char* call, int peer) {
    return Status::error(fmt::format("[dist] {} rank {}: no peer on one process (a pipeline needs a rank per "
                                     "stage: start it with mpirun -np N)", call, peer));
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
    if (worker_.joinable()) {
      {
        std::lock_guard<std::mutex> lk(mu_);
        stop_ = true;
      }
      cv_.notify_all();
      worker_.join();
    }
    for (MPI_Request& r : arrive_req_)
      if (r != MPI_REQUEST_NULL) MPI_Cancel(&r), MPI_Request_free(&r);
    for (MPI_Request& r : sends_)  // sends never waited for (the caller skipped wait_sends) finish on their own
      if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
    for (MPI_Comm* c : {&node_, &column_, &p2p_})
      if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
    if (world_ != MPI_COMM_WORLD) {  // a group of split(): MPI itself belongs to the job's communicator
      MPI_Comm_free(&world_);
      return;
    }
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin) MPI_Finalize();
  }
  Status init(const DistConfig& c) {
    int provided = 0;
    // SERIALIZED: the communication thread and the caller take turns (never both inside MPI).
    if (Status s = mpi_status(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "init"); !s)
      return s;
    threaded_ = provided >= MPI_THREAD_SERIALIZED;
    return attach(MPI_COMM_WORLD, c);
  }
  // The ranks of this communicator with the same color form a group (MPI_Comm_split), ordered by
  // key (ties by this communicator's rank). The group reduces flat, whatever this one does.
  Status split(int color, int key, std::unique_ptr<Communicator>& out) override {
    if (color < 0) return Status::error(fmt::format("[dist] split: color {} must be >= 0", color));
    MPI_Comm sub = MPI_COMM_NULL;
    if (Status s = mpi_status(MPI_Comm_split(world_, color, key, &sub), "comm split"); !s) return s;
    auto g = std::make_unique<MpiComm>();
    g->threaded_ = threaded_;
    DistConfig flat = config_;
    flat.allreduce = AllReduceAlgo::kFlat;
    if (Status s = g->attach(sub, flat); !s) return s;
    out = std::move(g);
    return Status::ok();
  }
  // Takes comm as this communicator's ranks: size, hosts, arrivals, the hierarchical groups.
  Status attach(MPI_Comm comm, const DistConfig& c) {
    world_ = comm;
    config_ = c;
    MPI_Comm_set_errhandler(world_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(world_, &rank_);
    MPI_Comm_size(world_, &size_);
    timeout_s_ = c.timeout_s;
    deterministic_ = c.deterministic;
    // Every rank's host, for naming a rank that stops answering.
    char host[MPI_MAX_PROCESSOR_NAME] = {};
    int len = 0;
    MPI_Get_processor_name(host, &len);
    std::vector<char> all((size_t)size_ * MPI_MAX_PROCESSOR_NAME);
    MPI_Allgather(host, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR, world_);
    for (int r = 0; r < size_; r++) {
      const char* h = all.data() + (size_t)r * MPI_MAX_PROCESSOR_NAME;
      hosts_.emplace_back(h, strnlen(h, MPI_MAX_PROCESSOR_NAME));
    }
    arrive_req_.assign(size_, MPI_REQUEST_NULL);
    arrive_step_.assign(size_, -1);
    arrive_buf_.assign(size_, -1);
    // Point-to-point messages get a communicator of their own: every tag is the caller's, none can
    // match the arrival messages on world_.
    if (Status s = mpi_status(MPI_Comm_dup(world_, &p2p_), "comm dup"); !s) return s;
    MPI_Comm_set_errhandler(p2p_, MPI_ERRORS_RETURN);
    if (c.allreduce != AllReduceAlgo::kHierarchical) return Status::ok();
    // Nodes: consecutive blocks of ranks_per_node, or the ranks sharing memory.
    if (c.ranks_per_node > 0) {
      if (size_ % c.ranks_per_node != 0)
        return Status::error(fmt::format("[dist] ranks_per_node = {}: must divide the {} ranks", c.ranks_per_node, size_));
      MPI_Comm_split(world_, rank_ / c.ranks_per_node, rank_, &node_);
    } else {
      MPI_Comm_split_type(world_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node_);
    }
    int local = 0, local_size = 0, node_id = 0, lo = 0, hi = 0;
    MPI_Comm_rank(node_, &local);
    MPI_Comm_size(node_, &local_size);
    MPI_Allreduce(&rank_, &node_id, 1, MPI_INT, MPI_MIN, node_);  // a node is named by its first rank
    MPI_Allreduce(&local_size, &lo, 1, MPI_INT, MPI_MIN, world_);
    MPI_Allreduce(&local_size, &hi, 1, MPI_INT, MPI_MAX, world_);
    if (lo != hi)
      return Status::error(fmt::format("[dist] allreduce = \"hierarchical\" needs nodes of equal size; here they hold "
                                       "{} to {} ranks (set dist.ranks_per_node or use \"flat\")", lo, hi));
    // The ranks holding the same slice on every node, ordered by node.
    MPI_Comm_split(world_, local, node_id, &column_);
    MPI_Comm_size(column_, &nodes_);
    hierarchical_ = true;
    return Status::ok();
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int nodes() const override { return hierarchical_ ? nodes_ : 1; }
  const char* algorithm() const override { return hierarchical_ ? "hierarchical" : "flat"; }
  Status barrier() override {
    TraceSpan span("barrier");
    MPI_Request req;
    return finish(MPI_Ibarrier(world_, &req), req, "barrier");
  }
  Status allreduce_sum(float* data, int64_t n) override {
    TraceSpan span("allreduce", "bytes", (double)n * sizeof(float));
    return sum_floats(data, n);
  }
  Status sum_floats(float* data, int64_t n) {
    if (!deterministic_) return native(data, n);
    return hierarchical_ ? reduce_hier(data, n, MPI_FLOAT, scratch_f_) : reduce(world_, data, n, MPI_FLOAT, scratch_f_);
  }
  Status reduce_scatter_sum(float* data, int64_t base, int64_t n, const std::vector<int64_t>& bounds) override {
    TraceSpan span("reduce_scatter", "bytes", (double)n * sizeof(float));
    return scatter_floats(data, base, n, bounds);
  }
  Status scatter_floats(float* data, int64_t base, int64_t n, const std::vector<int64_t>& bounds) {
    for (int64_t at = 0; at < n; at += kSlab) {
      const int64_t len = std::min(kSlab, n - at);
      owner_slices(base + at, len, bounds);
      if (Status s = scatter_sum(world_, data + at, len, MPI_FLOAT, scratch_f_); !s) return s;
    }
    return Status::ok();
  }
  Status allgather_ranges(float* data, const std::vector<int64_t>& bounds) override {
    TraceSpan span("allgather", "bytes", (double)bounds.back() * sizeof(float));
    const int64_t n = bounds.back();
    for (int64_t at = 0; at < n; at += kSlab) {
      const int64_t len = std::min(kSlab, n - at);
      owner_slices(at, len, bounds);
      if (Status s = gather(world_, data + at, MPI_FLOAT); !s) return s;
    }
    return Status::ok();
  }
  void sum_async(float* data, int64_t base, int64_t n, const std::vector<int64_t>* bounds) override {
    Task t{data, base, n, bounds};
    if (!threaded_) {  // no thread support: reduce now
      const double t0 = now_ms();
      if (Status s = run_task(t); !s && async_error_) async_error_ = s;
      busy_ms_ += now_ms() - t0;
      return;
    }
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (!worker_.joinable()) worker_ = std::thread([this] { work(); });
      tasks_.push_back(t);
    }
    cv_.notify_all();
  }
  Status wait_async(double* busy_ms) override {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return tasks_.empty() && !running_; });
    Status s = async_error_;
    async_error_ = Status::ok();
    if (busy_ms) *busy_ms = busy_ms_;
    busy_ms_ = 0;
    return s;
  }
  void arrive(int64_t step) override {
    // Rank 0 hears from every rank and every rank hears from rank 0, one message per step each; a
    // message that has not come when a collective times out names its sender.
    step_ = step;
    for (int r = 0; r < size_; r++)
      if (peer(r)) arrived(r);  // keeps a receive posted, consuming messages in order
    int64_t& buf = send_buf_[(size_t)step % send_buf_.size()];  // a send's buffer lives for many steps
    buf = step;
    for (int r = 0; r < size_; r++) {
      if (!peer(r)) continue;
      MPI_Request req;
      MPI_Isend(&buf, 1, MPI_INT64_T, r, kArriveTag, world_, &req);
      MPI_Request_free(&req);
    }
  }
  Status allreduce_sum(double* data, int64_t n) override {
    TraceSpan span("allreduce.scalars", "bytes", (double)n * sizeof(double));
    return reduce(world_, data, n, MPI_DOUBLE, scratch_d_);
  }
  Status allreduce_max(float* data, int64_t n) override {
    TraceSpan span("allreduce.max", "bytes", (double)n * sizeof(float));
    return library_allreduce(data, n, MPI_MAX, "max all-reduce (MPI_Iallreduce)");
  }
  uint64_t bytes_sent() const override { return bytes_; }

  // Point to point, on p2p_. A message is one MPI message per piece of kPiece floats (MPI's
  // non-overtaking rule keeps the pieces, and messages with one tag, in the order sent).
  Status send_async(const float* data, int64_t n, int peer, int tag) override {
    TraceSpan span("send", "bytes", (double)n * sizeof(float));
    span.arg("peer", peer);
    if (Status s = check_p2p("send_async to", n, peer, tag); !s) return s;
    int64_t at = 0;
    do {  // n = 0 still sends one (empty) message, which a recv of 0 floats matches
      const int len = (int)std::min(kPiece, n - at);
      MPI_Request req;
      if (Status s = mpi_status(MPI_Isend(data + at, len, MPI_FLOAT, peer, tag, p2p_, &req), "send"); !s) return s;
      sends_.push_back(req);
      at += len;
    } while (at < n);
    bytes_ += (uint64_t)n * sizeof(float);
    return Status::ok();
  }
  Status recv(float* data, int64_t n, int peer, int tag) override {
    TraceSpan span("recv", "bytes", (double)n * sizeof(float));
    span.arg("peer", peer);
    if (Status s = check_p2p("recv from", n, peer, tag); !s) return s;
    const double t0 = now_ms();
    Status s = recv_pieces(data, n, peer, tag);
    recv_wait_ms_ += now_ms() - t0;
    return s;
  }
  Status wait_sends() override {
    TraceSpan span("wait_sends", "messages", (double)sends_.size());
    Status s = poll("sends (wait_sends)", [&](int& done) {
      return MPI_Testall((int)sends_.size(), sends_.data(), &done, MPI_STATUSES_IGNORE);
    });
    sends_.clear();
    return s;
  }
  // A message moves a few fragments per MPI call, so one test barely starts it: tests for up to
  // kProgressSpinMs, enough for a few MB when the receiver is waiting for them, and a cost of at
  // most that when it is not. Completed requests become MPI_REQUEST_NULL (wait_sends skips them).
  void progress() override {
    if (sends_.empty()) return;
    const double t0 = now_ms();
    for (int done = 0; !done;) {
      MPI_Testall((int)sends_.size(), sends_.data(), &done, MPI_STATUSES_IGNORE);
      if (done) sends_.clear();
      else if (now_ms() - t0 > kProgressSpinMs) return;
    }
  }
  double take_recv_wait_ms() override {
    const double ms = recv_wait_ms_;
    recv_wait_ms_ = 0;
    return ms;
  }
  Status allgather_sparse(const int64_t* idx, const float* val, int count, std::vector<int64_t>& all_idx,
                          std::vector<float>& all_val, std::vector<int>& counts) override {
    TraceSpan span("allgather.sparse", "entries", count);
    counts.resize(size_);
    MPI_Request req;
    if (Status s = finish(MPI_Iallgather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, world_, &req), req,
                          "sparse all-gather (counts)");
        !s)
      return s;
    std::vector<int>& displs = displs_;
    displs.resize(size_);
    int64_t total = 0;
    for (int r = 0; r < size_; r++) displs[r] = (int)total, total += counts[r];
    all_idx.resize(total);
    all_val.resize(total);
    if (Status s = finish(MPI_Iallgatherv(idx, count, MPI_INT64_T, all_idx.data(), counts.data(), displs.data(),
                                          MPI_INT64_T, world_, &req),
                          req, "sparse all-gather (indices)");
        !s)
      return s;
    if (Status s = finish(MPI_Iallgatherv(val, count, MPI_FLOAT, all_val.data(), counts.data(), displs.data(),
                                          MPI_FLOAT, world_, &req),
                          req, "sparse all-gather (values)");
        !s)
      return s;
    bytes_ += (uint64_t)count * (sizeof(int64_t) + sizeof(float)) * (size_ - 1);
    return Status::ok();
  }
  [[noreturn]] void abort(int code) override {
    MPI_Abort(MPI_COMM_WORLD, code);
    std::exit(code);
  }

 private:
  struct Task {
    float* data;
    int64_t base, n;
    const std::vector<int64_t>* bounds;
  };
  static constexpr int kArriveTag = 7311;
  static constexpr int kMaxTag = 32767;  // the least MPI_TAG_UB that MPI guarantees
  // A point-to-point piece: its count fits MPI's int, and so does its size in bytes.
  static constexpr int64_t kPiece = INT_MAX / 4;
  static constexpr double kProgressSpinMs = 1.0;

  static double now_ms() {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
  }
  // One gradient bucket's sum (a span on the thread that runs it: the communication thread).
  Status run_task(const Task& t) {
    TraceSpan span("allreduce.bucket", "bytes", (double)t.n * sizeof(float));
    span.arg("offset", (double)t.base);
    return t.bounds ? scatter_floats(t.data, t.base, t.n, *t.bounds) : sum_floats(t.data, t.n);
  }
  // The communication thread: runs queued sums in order.
  void work() {
    trace_thread_name("comm");
    std::unique_lock<std::mutex> lk(mu_);
    for (;;) {
      cv_.wait(lk, [&] { return stop_ || !tasks_.empty(); });
      if (tasks_.empty()) return;  // stop_
      const Task t = tasks_.front();
      tasks_.pop_front();
      running_ = true;
      lk.unlock();
      const double t0 = now_ms();
      Status s = run_task(t);
      const double ms = now_ms() - t0;
      lk.lock();
      busy_ms_ += ms;
      if (!s && async_error_) async_error_ = s;
      running_ = false;
      cv_.notify_all();
    }
  }

  bool peer(int r) const { return r != rank_ && (rank_ == 0 || r == 0); }
  // Whether rank r's arrival for step_ has come; keeps one receive from r posted.
  bool arrived(int r) {
    for (;;) {
      if (arrive_step_[r] >= step_) return true;
      if (arrive_req_[r] == MPI_REQUEST_NULL)
        MPI_Irecv(&arrive_buf_[r], 1, MPI_INT64_T, r, kArriveTag, world_, &arrive_req_[r]);
      int done = 0;
      MPI_Test(&arrive_req_[r], &done, MPI_STATUS_IGNORE);  // sets the request to null when done
      if (!done) return false;
      arrive_step_[r] = arrive_buf_[r];  // the buffer is read only once its receive completed
    }
  }
  std::vector<int> missing() {
    std::vector<int> out;
    for (int r = 0; r < size_; r++)
      if (peer(r) && !arrived(r)) out.push_back(r);
    return out;
  }
  std::string name(int r) const { return fmt::format("rank {} (host {})", r, hosts_.empty() ? "?" : hosts_[r]); }

  Status check_p2p(const char* call, int64_t n, int peer, int tag) const {
    if (peer < 0 || peer >= size_ || peer == rank_)
      return Status::error(fmt::format("[dist] {} rank {}: the peer must be another rank of this communicator "
                                       "(ranks 0 to {}; this one is {})", call, peer, size_ - 1, rank_));
    if (tag < 0 || tag > kMaxTag)
      return Status::error(fmt::format("[dist] {} rank {}: tag {} is outside 0 to {}", call, peer, tag, kMaxTag));
    if (n < 0) return Status::error(fmt::format("[dist] {} rank {}: n = {} floats is negative", call, peer, n));
    return Status::ok();
  }
  // Each piece's envelope is matched first (a polled MPI_Improbe, which gives its length before any
  // data lands), then it is received into place (MPI_Imrecv). A piece of another length is received
  // into a buffer of its own, so it does not stay queued ahead of the next message, and reported.
  Status recv_pieces(float* data, int64_t n, int peer, int tag) {
    const std::string what = fmt::format("recv of {} floats from {} (tag {})", n, name(peer), tag);
    int64_t at = 0;
    do {
      const int len = (int)std::min(kPiece, n - at);
      MPI_Message msg = MPI_MESSAGE_NULL;
      MPI_Status st;
      if (Status s = poll(what.c_str(), [&](int& found) { return MPI_Improbe(peer, tag, p2p_, &found, &msg, &st); });
          !s)
        return s;
      int count = 0;
      MPI_Get_count(&st, MPI_FLOAT, &count);  // p2p_ carries only send_async's floats
      MPI_Request req;
      if (count != len) {
        std::vector<float> other((size_t)count);
        (void)finish(MPI_Imrecv(other.data(), count, MPI_FLOAT, &msg, &req), req, what.c_str());
        const std::string part = n > kPiece ? fmt::format(" (the piece at float {})", at) : "";
        return Status::error(fmt::format("[dist] {}{}: expected {} floats, the message sent holds {}; the two ranks "
                                         "disagree on this message's size",
                                         what, part, len, count));
      }
      if (Status s = finish(MPI_Imrecv(data + at, len, MPI_FLOAT, &msg, &req), req, what.c_str()); !s) return s;
      at += len;
    } while (at < n);
    return Status::ok();
  }
  // Slabs keep every MPI count within int.
  static constexpr int64_t kSlab = 1 << 26;

  // The MPI library's all-reduce (dist.deterministic = false): its own algorithm and summation
  // order, which may depend on the rank count and message size.
  Status native(float* data, int64_t n) { return library_allreduce(data, n, MPI_SUM, "all-reduce (MPI_Iallreduce)"); }
  // The MPI library's in-place all-reduce of floats with `op`, in slabs.
  Status library_allreduce(float* data, int64_t n, MPI_Op op, const char* what) {
    for (int64_t at = 0; at < n; at += kSlab) {
      const int len = (int)std::min(kSlab, n - at);
      MPI_Request req;
      if (Status s = finish(MPI_Iallreduce(MPI_IN_PLACE, data + at, len, MPI_FLOAT, op, world_, &req), req, what); !s)
        return s;
      bytes_ += (uint64_t)len * sizeof(float) * 2 * (size_ - 1) / size_;  // (a ring's volume)
    }
    return Status::ok();
  }

  // Rank-ordered all-reduce over comm, in slabs.
  template <typename T>
  Status reduce(MPI_Comm comm, T* data, int64_t n, MPI_Datatype type, std::vector<T>& scratch) {
    int R = 1;
    MPI_Comm_size(comm, &R);
    if (R == 1) return Status::ok();
    for (int64_t at = 0; at < n; at += kSlab) {
      const int64_t len = std::min(kSlab, n - at);
      even_slices(comm, len);
      if (Status s = scatter_sum(comm, data + at, len, type, scratch); !s) return s;
      if (Status s = gather(comm, data + at, type); !s) return s;
    }
    return Status::ok();
  }

  // Node reduce-scatter, slice all-reduce across nodes, node all-gather (slab by slab).
  template <typename T>
  Status reduce_hier(T* data, int64_t n, MPI_Datatype type, std::vector<T>& scratch) {
    if (size_ == 1) return Status::ok();
    for (int64_t at = 0; at < n; at += kSlab) {
      const int64_t len = std::min(kSlab, n - at);
      int64_t off = 0, mine = len;
      int local_size = 1, local = 0;
      MPI_Comm_size(node_, &local_size);
      if (local_size > 1) {
        even_slices(node_, len);
        MPI_Comm_rank(node_, &local);
        off = displs_[local], mine = counts_[local];
        if (Status s = scatter_sum(node_, data + at, len, type, scratch); !s) return s;
      }
      if (Status s = reduce(column_, data + at + off, mine, type, scratch); !s) return s;
      if (local_size > 1) {
        even_slices(node_, len);
        if (Status s = gather(node_, data + at, type); !s) return s;
      }
    }
    return Status::ok();
  }

  // Member r of comm gets elements [n r / R, n (r+1) / R).
  void even_slices(MPI_Comm comm, int64_t n) {
    int R = 1;
    MPI_Comm_size(comm, &R);
    counts_.resize(R), displs_.resize(R);
    for (int r = 0; r < R; r++) {
      const int64_t b = n * r / R, e = n * (r + 1) / R;
      counts_[r] = (int)(e - b);
      displs_[r] = (int)b;
    }
  }
  // Rank r gets the part of [base, base + n) inside [bounds[r], bounds[r+1]) (ZeRO-1 owners).
  void owner_slices(int64_t base, int64_t n, const std::vector<int64_t>& bounds) {
    counts_.resize(size_), displs_.resize(size_);
    for (int r = 0; r < size_; r++) {
      const int64_t b = std::clamp(bounds[r], base, base + n), e = std::clamp(bounds[r + 1], base, base + n);
      counts_[r] = (int)(e - b);
      displs_[r] = (int)(b - base);
    }
  }

  // With counts_/displs_ set for comm: member r's slice of every member's buffer goes to member r,
  // which sums it in member order, in place.
  template <typename T>
  Status scatter_sum(MPI_Comm comm, T* data, int64_t n, MPI_Datatype type, std::vector<T>& scratch) {
    int R = 1, me = 0;
    MPI_Comm_size(comm, &R);
    MPI_Comm_rank(comm, &me);
    const int mine = counts_[me];
    rcounts_.resize(R), rdispls_.resize(R);
    for (int r = 0; r < R; r++) rcounts_[r] = mine, rdispls_[r] = r * mine;
    if (scratch.size() < (size_t)R * mine) scratch.resize((size_t)R * mine);
    MPI_Request req;
    if (Status s = finish(MPI_Ialltoallv(data, counts_.data(), displs_.data(), type, scratch.data(), rcounts_.data(),
                                         rdispls_.data(), type, comm, &req),
                          req, "all-reduce (alltoallv)");
        !s)
      return s;
    T* out = data + displs_[me];
    for (int i = 0; i < mine; i++) {
      T acc = scratch[i];
      for (int r = 1; r < R; r++) acc += scratch[(size_t)r * mine + i];
      out[i] = acc;
    }
    bytes_ += (uint64_t)(n - mine) * sizeof(T);
    return Status::ok();
  }

  // With counts_/displs_ set for comm: every member's slice to every member.
  template <typename T>
  Status gather(MPI_Comm comm, T* data, MPI_Datatype type) {
    int R = 1, me = 0;
    MPI_Comm_size(comm, &R);
    MPI_Comm_rank(comm, &me);
    bytes_ += (uint64_t)counts_[me] * (R - 1) * sizeof(T);
    MPI_Request req;
    return finish(MPI_Iallgatherv(MPI_IN_PLACE, 0, type, data, counts_.data(), displs_.data(), type, comm, &req), req,
                  "all-reduce (allgatherv)");
  }

  // A non-blocking collective: `started` is its start's return code, then it is polled to its end.
  Status finish(int started, MPI_Request& req, const char* what) {
    if (Status s = mpi_status(started, what); !s) return s;
    return wait(req, what);
  }

  // Polls a non-blocking collective; past the timeout the job is ended (some rank stopped
  // responding: a blocking call would wait forever).
  Status wait(MPI_Request& req, const char* what) {
    return poll(what, [&](int& done) { return MPI_Test(&req, &done, MPI_STATUS_IGNORE); });
  }
  // Calls test(done), an MPI test call, until it sets done, with the timeout above.
  template <typename Test>
  Status poll(const char* what, Test test) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int spins = 0;; spins++) {
      int done = 0;
      if (Status s = mpi_status(test(done), what); !s) return s;
      if (done) return Status::ok();
      if (spins > 1000) std::this_thread::sleep_for(std::chrono::microseconds(50));
      const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (timeout_s_ > 0 && waited > timeout_s_) timed_out(what, waited);
    }
  }

  // A collective waited past the timeout: name who did not arrive and end the job. Rank 0 knows
  // every rank's arrival; another rank names rank 0 when it is rank 0 that is missing, else gives
  // rank 0 a grace period to end the job with the names first.
  [[noreturn]] void timed_out(const char* what, double waited) {
    std::vector<int> gone = step_ >= 0 ? missing() : std::vector<int>{};
    if (rank_ != 0 && gone.empty()) {
      const double grace = std::min(30.0, std::max(2.0, timeout_s_));
      const auto t0 = std::chrono::steady_clock::now();
      while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < grace)
        std::this_thread::sleep_for(std::chrono::milliseconds(100));  // rank 0 ends the job meanwhile
    }
    std::string who;
    for (int r : gone) who += (who.empty() ? "" : ", ") + name(r);
    std::fprintf(stderr,
                 "[dist] rank %d of %d: %s waited %.0f s for the other ranks ([dist] timeout_s = %g); %s: ending the "
                 "job (relaunch with --resume)\n",
                 rank_, size_, what, waited, timeout_s_,
                 !who.empty() ? fmt::format("{} never reached step {}'s gradient reduction (hung or gone)", who, step_ + 1).c_str()
                              : "a rank is hung or gone");
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::exit(1);
  }

  MPI_Comm world_ = MPI_COMM_WORLD;  // this communicator's ranks (the job's, or a split() group)
  DistConfig config_;
  int rank_ = 0, size_ = 1, nodes_ = 1;
  double timeout_s_ = 600;
  bool hierarchical_ = false, deterministic_ = true;
  MPI_Comm node_ = MPI_COMM_NULL, column_ = MPI_COMM_NULL;
  MPI_Comm p2p_ = MPI_COMM_NULL;     // world_'s ranks, for point-to-point messages only
  std::vector<MPI_Request> sends_;   // started by send_async, completed by wait_sends
  double recv_wait_ms_ = 0;          // time blocked in recv since take_recv_wait_ms
  std::vector<std::string> hosts_;
  // arrivals (naming a hung rank)
  int64_t step_ = -1;
  std::vector<int64_t> send_buf_ = std::vector<int64_t>(64);
  std::vector<MPI_Request> arrive_req_;
  std::vector<int64_t> arrive_step_, arrive_buf_;  // last step heard from each rank; receive buffers
  // the communication thread
  bool threaded_ = false, stop_ = false, running_ = false;
  std::thread worker_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> tasks_;
  Status async_error_;
  double busy_ms_ = 0;
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
  if (!c.deterministic && c.allreduce != AllReduceAlgo::kFlat)
    return Status::error("[dist] deterministic = false uses the MPI library's flat all-reduce: set allreduce = \"flat\"");
  if (c.zero == 1 && c.allreduce != AllReduceAlgo::kFlat)
    return Status::error("[dist] zero = 1 shards over all ranks with a flat reduce-scatter: set allreduce = \"flat\"");
  if (c.zero == 1 && c.compression != GradCompression::kNone)
    return Status::error("[dist] zero = 1 and [dist.compression] type = \"topk\" do not combine (top-k sends whole-"
                         "gradient entries to every rank); use one of them");
  return Status::ok();
}

int64_t dist_bucket_elements(double bucket_mb) {
  return std::max<int64_t>(1, (int64_t)(bucket_mb * 1048576 / sizeof(float)));
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
