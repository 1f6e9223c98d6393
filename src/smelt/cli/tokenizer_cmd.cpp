// `smelt tokenizer encode|decode` (and dispatch of `train` to tokenizer_train_cmd.cpp): text files
// to token ids (space-separated text or uint32 LE with 0xFFFFFFFF after each document) and back.
// Streams blocks of lines through a pool of encoders and writes them in input order. Not the
// tokenizer itself (tokenizer/) and not Megatron shards (`smelt tokenize`).
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <future>
#include <thread>

#include <sys/stat.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "smelt/cli/cli_parse.hpp"
#include "smelt/cli/commands.hpp"
#include "smelt/common/files.hpp"
#include "smelt/common/log.hpp"
#include "smelt/common/progress.hpp"
#include "smelt/common/queue.hpp"
#include "smelt/tokenizer/tokenizer.hpp"

namespace smelt {

namespace {

constexpr size_t kBlockBytes = 1 << 20;  // lines are encoded in blocks of about this size
constexpr uint32_t kDocEnd = 0xFFFFFFFFu;

// Reads a file (or stdin for "-") in chunks.
class Input {
 public:
  ~Input() {
    if (f_ && f_ != stdin) std::fclose(f_);
  }
  Status open(const std::string& path) {
    path_ = path;
    if (path == "-") { f_ = stdin; return Status::ok(); }
    f_ = std::fopen(path.c_str(), "rb");
    if (!f_) return Status::error(path + ": cannot open: " + std::strerror(errno));
    if (std::fseek(f_, 0, SEEK_END) == 0) { size_ = static_cast<uint64_t>(std::ftell(f_)); std::fseek(f_, 0, SEEK_SET); }
    return Status::ok();
  }
  // Appends up to n bytes; returns how many (0 at the end).
  size_t read(std::string& buf, size_t n) {
    size_t old = buf.size();
    buf.resize(old + n);
    size_t got = std::fread(buf.data() + old, 1, n, f_);
    buf.resize(old + got);
    return got;
  }
  bool failed() const { return std::ferror(f_); }
  uint64_t size() const { return size_; }

 private:
  std::string path_;
  std::FILE* f_ = nullptr;
  uint64_t size_ = 0;
};

// Writes to an atomically committed file; straight to stdout for "-" and to a path that exists and
// is not a regular file (/dev/null, a FIFO), which an atomic rename would replace.
class Output {
 public:
  ~Output() {
    if (f_ && f_ != stdout) std::fclose(f_);
  }
  Status open(const std::string& path) {
    path_ = path;
    struct stat st;
    if (path == "-") {
      f_ = stdout;
    } else if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
      f_ = std::fopen(path.c_str(), "wb");
      if (!f_) return Status::error(path + ": cannot open: " + std::strerror(errno));
    } else {
      return file_.open(path);
    }
    return Status::ok();
  }
  Status write(std::string_view s) {
    if (!f_) return file_.write(s);
    if (std::fwrite(s.data(), 1, s.size(), f_) != s.size()) return Status::error(path_ + ": write failed");
    return Status::ok();
  }
  Status commit() {
    if (!f_) return file_.commit();
    return std::fflush(f_) == 0 ? Status::ok() : Status::error(path_ + ": flush failed");
  }

 private:
  std::string path_;
  std::FILE* f_ = nullptr;  // stdout or a device; null: file_
  AtomicFile file_;
};

// A fixed pool of threads running tasks in any order; results come back through futures.
class Pool {
 public:
  explicit Pool(int n) : q_(static_cast<size_t>(n) * 2) {
    for (int i = 0; i < n; i++)
      th_.emplace_back([this] {
        while (auto t = q_.pop()) (*t)();
      });
  }
  ~Pool() {
    q_.close();
    for (auto& t : th_) t.join();
  }
  std::future<std::string> submit(std::function<std::string()> fn) {
    auto task = std::make_shared<std::packaged_task<std::string()>>(std::move(fn));
    auto fut = task->get_future();
    q_.push([task] { (*task)(); });
    return fut;
  }

 private:
  BoundedQueue<std::function<void()>> q_;
  std::vector<std::thread> th_;
};

struct Counts {
  uint64_t docs = 0, tokens = 0;
};

void append_ids(const std::vector<uint32_t>& ids, bool bin, std::string& out) {
  if (bin) {
    size_t old = out.size();
    out.resize(old + (ids.size() + 1) * 4);
    char* p = out.data() + old;
    for (uint32_t id : ids) {  // little-endian on every host
      p[0] = static_cast<char>(id); p[1] = static_cast<char>(id >> 8); p[2] = static_cast<char>(id >> 16); p[3] = static_cast<char>(id >> 24);
      p += 4;
    }
    std::memset(p, 0xFF, 4);
  } else {
    char buf[16];
    for (size_t k = 0; k < ids.size(); k++) {
      char* e = fmt::format_to(buf, "{}", ids[k]);
      if (k) out.push_back(' ');
      out.append(buf, e);
    }
    out.push_back('\n');
  }
}

// Encodes the lines of block (the text between its '\n's, the last one included even when empty);
// returns the output bytes.
std::string encode_block(const Tokenizer& tok, const std::string& block, bool bin, bool special, Counts& c) {
  std::string out;
  out.reserve(block.size() * (bin ? 2 : 2));
  std::vector<uint32_t> ids;
  for (size_t s = 0;;) {  // n newlines: n + 1 lines
    size_t e = block.find('\n', s);
    if (e == std::string::npos) e = block.size();
    ids.clear();
    tok.encode(std::string_view(block).substr(s, e - s), ids, special);
    append_ids(ids, bin, out);
    c.docs++;
    c.tokens += ids.size();
    if (e == block.size()) break;
    s = e + 1;
  }
  return out;
}

int encode_main(const Tokenizer& tok, const std::string& in_path, const std::string& out_path, bool bin, int threads,
                bool whole, bool special) {
  Input in;
  Output out;
  if (Status s = in.open(in_path); !s) { spdlog::error("{}", s.message()); return kExitUsage; }
  if (Status s = out.open(out_path); !s) { spdlog::error("{}", s.message()); return kExitFailure; }
  Progress progress("tokenizer encode", in.size());
  Counts total;
  uint64_t bytes_in = 0;
  if (whole) {  // one document: the whole file, newlines included
    std::string text;
    while (in.read(text, 1 << 24)) {}
    if (in.failed()) { spdlog::error("{}: read failed", in_path); return kExitFailure; }
    std::vector<uint32_t> ids;
    tok.encode(text, ids, special);
    std::string o;
    append_ids(ids, bin, o);
    if (Status s = out.write(o); !s) { spdlog::error("{}", s.message()); return kExitFailure; }
    total = {1, ids.size()};
    bytes_in = text.size();
  } else {
    std::unique_ptr<Pool> pool;
    if (threads > 1) pool = std::make_unique<Pool>(threads);
    struct Pending { std::future<std::string> fut; std::shared_ptr<Counts> counts; uint64_t bytes; };
    std::deque<Pending> pending;
    Status werr;
    auto drain_one = [&] {
      Pending p = std::move(pending.front());
      pending.pop_front();
      std::string o = p.fut.get();
      if (werr) werr = out.write(o);
      total.docs += p.counts->docs;
      total.tokens += p.counts->tokens;
      bytes_in += p.bytes;
      progress.tick(total.docs, bytes_in);
    };
    std::string carry;
    bool eof = false, need_more = false;
    while (werr) {
      std::string block = std::move(carry);
      carry.clear();
      while (!eof && (block.size() < kBlockBytes || need_more)) {
        need_more = false;
        if (!in.read(block, kBlockBytes)) eof = true;
      }
      if (in.failed()) { spdlog::error("{}: read failed", in_path); return kExitFailure; }
      if (!eof) {  // keep the unfinished last line for the next block
        size_t nl = block.rfind('\n');
        if (nl == std::string::npos) {  // one line longer than a block: read on
          carry = std::move(block);
          need_more = true;
          continue;
        }
        carry.assign(block, nl + 1, std::string::npos);
        block.resize(nl);
      } else {
        if (block.empty()) break;
        if (block.back() == '\n') block.pop_back();
      }
      uint64_t nbytes = block.size() + 1;
      auto counts = std::make_shared<Counts>();
      if (pool) {
        auto shared = std::make_shared<std::string>(std::move(block));
        pending.push_back({pool->submit([&tok, shared, bin, special, counts] { return encode_block(tok, *shared, bin, special, *counts); }),
                           counts, nbytes});
        while (pending.size() > static_cast<size_t>(threads) * 2) drain_one();
      } else {
        std::promise<std::string> pr;
        pr.set_value(encode_block(tok, block, bin, special, *counts));
        pending.push_back({pr.get_future(), counts, nbytes});
        drain_one();
      }
      if (eof) break;
    }
    while (!pending.empty()) drain_one();
    if (!werr) { spdlog::error("{}", werr.message()); return kExitFailure; }
    bytes_in = std::min<uint64_t>(bytes_in, in.size() ? in.size() : bytes_in);
  }
  if (Status s = out.commit(); !s) { spdlog::error("{}", s.message()); return kExitFailure; }
  progress.finish();
  double sec = progress.elapsed_s();
  std::fputs(fmt::format("[tokenizer encode] {} documents, {} tokens, {} bytes in {:.2f} s ({:.1f} MB/s, {:.2f} bytes/token)\n",
                         total.docs, total.tokens, bytes_in, sec, sec > 0 ? bytes_in / sec / 1e6 : 0.0,
                         total.tokens ? double(bytes_in) / total.tokens : 0.0).c_str(), stderr);
  return kExitOk;
}

int decode_main(const Tokenizer& tok, const std::string& in_path, const std::string& out_path, bool bin, bool whole) {
  Input in;
  Output out;
  if (Status s = in.open(in_path); !s) { spdlog::error("{}", s.message()); return kExitUsage; }
  if (Status s = out.open(out_path); !s) { spdlog::error("{}", s.message()); return kExitFailure; }
  const uint32_t nv = tok.vocab_size();
  std::string buf, text;
  std::vector<uint32_t> ids;
  uint64_t docs = 0, tokens = 0, offset = 0;
  auto fail_id = [&](uint64_t where, const std::string& what) {
    spdlog::error("{} {} {}: {}", in_path, bin ? "byte" : "line", where, what);
    return kExitFailure;
  };
  auto end_doc = [&] {
    tok.decode(ids.data(), ids.size(), text);
    if (!whole) text.push_back('\n');
    ids.clear();
    docs++;
  };
  bool eof = false;
  uint64_t line = 0;
  while (!eof) {
    if (!in.read(buf, kBlockBytes)) eof = true;
    if (in.failed()) { spdlog::error("{}: read failed", in_path); return kExitFailure; }
    size_t used = 0;
    if (bin) {
      for (; used + 4 <= buf.size(); used += 4, offset += 4) {
        const auto* p = reinterpret_cast<const unsigned char*>(buf.data() + used);
        uint32_t id = p[0] | (p[1] << 8) | (p[2] << 16) | (static_cast<uint32_t>(p[3]) << 24);
        if (id == kDocEnd) { end_doc(); continue; }
        if (id >= nv) return fail_id(offset, fmt::format("id {} is outside the vocabulary (size {})", id, nv));
        ids.push_back(id);
        tokens++;
      }
      if (eof && used != buf.size()) return fail_id(offset, "truncated: the file size is not a multiple of 4");
      if (eof && !ids.empty()) end_doc();  // a last document without its end marker
    } else {
      for (;;) {
        size_t nl = buf.find('\n', used);
        if (nl == std::string::npos && !(eof && used < buf.size())) break;
        if (nl == std::string::npos) nl = buf.size();
        line++;
        const char* p = buf.data() + used;
        const char* e = buf.data() + nl;
        while (p < e) {
          while (p < e && (*p == ' ' || *p == '\t' || *p == '\r')) p++;
          if (p == e) break;
          uint64_t v = 0;
          const char* d = p;
          while (p < e && *p >= '0' && *p <= '9' && v <= nv) v = v * 10 + (*p++ - '0');
          if (p == d || (p < e && *p != ' ' && *p != '\t' && *p != '\r'))
            return fail_id(line, "expected space-separated token ids");
          if (v >= nv) return fail_id(line, fmt::format("id {} is outside the vocabulary (size {})", v, nv));
          ids.push_back(static_cast<uint32_t>(v));
          tokens++;
        }
        end_doc();
        used = std::min(nl + 1, buf.size());
      }
    }
    buf.erase(0, used);
    if (text.size() > kBlockBytes || eof) {
      if (Status s = out.write(text); !s) { spdlog::error("{}", s.message()); return kExitFailure; }
      text.clear();
    }
  }
  if (Status s = out.commit(); !s) { spdlog::error("{}", s.message()); return kExitFailure; }
  std::fputs(fmt::format("[tokenizer decode] {} documents, {} tokens\n", docs, tokens).c_str(), stderr);
  return kExitOk;
}

int encode_decode(int argc, char** argv, bool encode) {
  std::string name = encode ? "encode" : "decode";
  CLI::App app{encode ? "smelt tokenizer encode: text -> token ids (each line one document, or --whole)"
                      : "smelt tokenizer decode: token ids -> text (reverses encode)"};
  app.name("smelt tokenizer " + name);
  std::string tok_path, input, output, format = "bin", pattern;
  int threads = 1;
  bool whole = false, no_special = false;
  app.add_option("-t,--tokenizer", tok_path, "tokenizer.json (HF byte-level BPE) or a tiktoken rank file")->required();
  app.add_option("-i,--input", input, "input file ('-': stdin)")->required();
  app.add_option("-o,--output", output, "output file ('-': stdout), written atomically")->required();
  app.add_option("--format", format, "bin: uint32 LE ids, 0xFFFFFFFF after each document; text: ids space-separated, a line per document")
      ->check(CLI::IsMember({"bin", "text"}));
  app.add_flag("--whole", whole, "the whole file is one document, newlines included");
  app.add_option("--tiktoken-pattern", pattern, "split pattern of a tiktoken file: cl100k, o200k, gpt2 (default: from its name)");
  if (encode) {
    app.add_option("--threads", threads, "encoder threads (lines mode)")->check(CLI::PositiveNumber);
    app.add_flag("--no-special", no_special, "encode special-token text (e.g. <|endoftext|>) as ordinary text");
  }
  if (int rc = cli_parse(app, argc, argv, "tokenizer"); rc >= 0) return rc;
  Tokenizer tok;
  if (Status s = Tokenizer::load(tok_path, tok, pattern); !s) {
    spdlog::error("{}", s.message());
    return kExitUsage;
  }
  bool bin = format == "bin";
  return encode ? encode_main(tok, input, output, bin, threads, whole, !no_special) : decode_main(tok, input, output, bin, whole);
}

}  // namespace

int cli_tokenizer(int argc, char** argv) {
  const char* usage =
      "usage: smelt tokenizer <train|encode|decode> [options]\n"
      "  train    text -> byte-level BPE tokenizer.json\n"
      "  encode   text -> token ids (--format bin|text)\n"
      "  decode   token ids -> text\n";
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    std::fputs(usage, argc < 2 ? stderr : stdout);
    return argc < 2 ? kExitUsage : kExitOk;
  }
  std::string sub = argv[1];
  if (sub == "train") return cli_tokenizer_train(argc - 1, argv + 1);
  if (sub == "encode") return encode_decode(argc - 1, argv + 1, true);
  if (sub == "decode") return encode_decode(argc - 1, argv + 1, false);
  std::fprintf(stderr, "smelt tokenizer: unknown command '%s'\n%s", sub.c_str(), usage);
  return kExitUsage;
}

}  // namespace smelt
