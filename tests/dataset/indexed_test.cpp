// MMIDIDX writer and reader: data built so the expected output is obvious (token j of sequence i is
// i*1000+j), both dtypes, empty sequences and datasets, random access, damaged files, and an
// independent numpy reader (tests/reference/mmidx_reader.py) that must agree on every field.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "smelt/dataset/indexed.hpp"
#include "test_files.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace smelt;

namespace {

class IndexedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("smelt_indexed_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string prefix(const std::string& name = "tokens") const { return (dir_ / name).string(); }
  fs::path dir_;
};

// Sequence i holds lens[i] tokens base + i*1000 + j.
std::vector<std::vector<uint32_t>> make_seqs(const std::vector<int>& lens, uint32_t base) {
  std::vector<std::vector<uint32_t>> v;
  for (size_t i = 0; i < lens.size(); ++i) {
    std::vector<uint32_t> s;
    for (int j = 0; j < lens[i]; ++j) s.push_back(base + static_cast<uint32_t>(i * 1000 + j));
    v.push_back(s);
  }
  return v;
}

void write_dataset(const std::string& prefix, IndexedDType dt, const std::vector<std::vector<uint32_t>>& seqs) {
  IndexedWriter w;
  ASSERT_TRUE(w.open(prefix, dt).is_ok());
  for (const auto& s : seqs) ASSERT_TRUE(w.add_document(s).is_ok());
  Status st = w.finish();
  ASSERT_TRUE(st.is_ok()) << st.message();
}

json numpy_read(const std::string& prefix, int* rc_out = nullptr) {
  std::string cmd = "/usr/bin/python3 " + std::string(SMELT_SOURCE_DIR) + "/tests/reference/mmidx_reader.py '" +
                    prefix + "' 2>&1";
  FILE* f = popen(cmd.c_str(), "r");
  std::string out;
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  int rc = pclose(f);
  if (rc_out) {
    *rc_out = rc;
    return json{{"output", out}};
  }
  EXPECT_EQ(rc, 0) << out;
  json j = json::parse(out, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << out;
  return j;
}

// Every field the numpy reader reports equals what was written.
void check_numpy_agrees(const std::string& prefix, IndexedDType dt, const std::vector<std::vector<uint32_t>>& seqs) {
  json j = numpy_read(prefix);
  const size_t item = dt == IndexedDType::kUInt16 ? 2 : 4;
  EXPECT_EQ(j["version"], 1);
  EXPECT_EQ(j["dtype_code"], dt == IndexedDType::kUInt16 ? 8 : 4);
  EXPECT_EQ(j["dtype"], dt == IndexedDType::kUInt16 ? "uint16" : "int32");
  EXPECT_EQ(j["sequence_count"], seqs.size());
  EXPECT_EQ(j["document_count"], seqs.size() + 1);
  std::vector<int64_t> lens, ptrs, docs{0};
  std::vector<std::vector<int64_t>> toks;
  int64_t at = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    lens.push_back(static_cast<int64_t>(seqs[i].size()));
    ptrs.push_back(at);
    at += static_cast<int64_t>(seqs[i].size() * item);
    docs.push_back(static_cast<int64_t>(i + 1));
    toks.emplace_back(seqs[i].begin(), seqs[i].end());
  }
  EXPECT_EQ(j["sequence_lengths"].get<std::vector<int64_t>>(), lens);
  EXPECT_EQ(j["sequence_pointers"].get<std::vector<int64_t>>(), ptrs);
  EXPECT_EQ(j["document_indices"].get<std::vector<int64_t>>(), docs);
  EXPECT_EQ(j["bin_bytes"], at);
  EXPECT_EQ(j["tokens"].get<std::vector<std::vector<int64_t>>>(), toks);
}

void check_reader_agrees(const std::string& prefix, IndexedDType dt, const std::vector<std::vector<uint32_t>>& seqs) {
  IndexedDataset ds;
  Status st = ds.open(prefix);
  ASSERT_TRUE(st.is_ok()) << st.message();
  EXPECT_EQ(ds.dtype(), dt);
  ASSERT_EQ(ds.sequences(), seqs.size());
  EXPECT_EQ(ds.documents(), seqs.size());
  uint64_t total = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    uint64_t b, e;
    ds.document_sequences(i, b, e);
    EXPECT_EQ(b, i);
    EXPECT_EQ(e, i + 1);
    EXPECT_EQ(ds.sequence(i).to_vector(), seqs[i]) << "sequence " << i;
    total += seqs[i].size();
  }
  EXPECT_EQ(ds.tokens(), total);
}

TEST(IndexedDtype, MegatronRule) {
  EXPECT_EQ(indexed_dtype_for_vocab(256), IndexedDType::kUInt16);
  EXPECT_EQ(indexed_dtype_for_vocab(50257), IndexedDType::kUInt16);
  EXPECT_EQ(indexed_dtype_for_vocab(65499), IndexedDType::kUInt16);
  EXPECT_EQ(indexed_dtype_for_vocab(65500), IndexedDType::kInt32);
  EXPECT_EQ(indexed_dtype_for_vocab(100277), IndexedDType::kInt32);
  EXPECT_EQ(static_cast<int>(IndexedDType::kUInt16), 8);
  EXPECT_EQ(static_cast<int>(IndexedDType::kInt32), 4);
}

TEST_F(IndexedTest, Uint16RoundTripAndNumpyAgrees) {
  // vocab 50000 -> uint16; ids up to 49999
  auto seqs = make_seqs({5, 1, 17, 0, 3, 40}, 0);
  seqs.push_back({0, 49999, 65535});
  ASSERT_EQ(indexed_dtype_for_vocab(50000), IndexedDType::kUInt16);
  write_dataset(prefix(), IndexedDType::kUInt16, seqs);
  EXPECT_EQ(fs::file_size(prefix() + ".bin"), (5 + 1 + 17 + 0 + 3 + 40 + 3) * 2u);
  EXPECT_EQ(fs::file_size(prefix() + ".idx"), 34 + 12 * seqs.size() + 8 * (seqs.size() + 1));
  EXPECT_FALSE(fs::exists(prefix() + ".bin.partial"));
  check_reader_agrees(prefix(), IndexedDType::kUInt16, seqs);
  check_numpy_agrees(prefix(), IndexedDType::kUInt16, seqs);
}

TEST_F(IndexedTest, Int32RoundTripAndNumpyAgrees) {
  // vocab 100000 -> int32; ids above 65535 survive
  ASSERT_EQ(indexed_dtype_for_vocab(100000), IndexedDType::kInt32);
  auto seqs = make_seqs({4, 0, 9, 2}, 60000);
  seqs.push_back({99999, 0, 65536, 2147483647u});
  write_dataset(prefix(), IndexedDType::kInt32, seqs);
  EXPECT_EQ(fs::file_size(prefix() + ".bin"), (4 + 9 + 2 + 4) * 4u);
  check_reader_agrees(prefix(), IndexedDType::kInt32, seqs);
  check_numpy_agrees(prefix(), IndexedDType::kInt32, seqs);
}

TEST_F(IndexedTest, ExactBytesOfSmallIndex) {
  write_dataset(prefix(), IndexedDType::kUInt16, {{7, 8}, {9}});
  std::string idx = test::read_file(prefix() + ".idx");
  std::string want("MMIDIDX\0\0", 9);
  auto u64 = [&](uint64_t v) { want.append(reinterpret_cast<const char*>(&v), 8); };
  auto i32 = [&](int32_t v) { want.append(reinterpret_cast<const char*>(&v), 4); };
  u64(1);
  want.push_back(8);
  u64(2);  // sequences
  u64(3);  // document indices
  i32(2); i32(1);
  u64(0); u64(4);
  u64(0); u64(1); u64(2);
  EXPECT_EQ(idx, want);
  EXPECT_EQ(test::read_file(prefix() + ".bin"), std::string("\x07\x00\x08\x00\x09\x00", 6));
}

TEST_F(IndexedTest, ZeroDocuments) {
  write_dataset(prefix(), IndexedDType::kUInt16, {});
  EXPECT_EQ(fs::file_size(prefix() + ".bin"), 0u);
  EXPECT_EQ(fs::file_size(prefix() + ".idx"), 34u + 8);
  IndexedDataset ds;
  ASSERT_TRUE(ds.open(prefix()).is_ok());
  EXPECT_EQ(ds.sequences(), 0u);
  EXPECT_EQ(ds.documents(), 0u);
  EXPECT_EQ(ds.tokens(), 0u);
  EXPECT_EQ(ds.locate(0).sequence, 0u);
  TokenView v;
  Status s = ds.sequence_checked(0, v);
  EXPECT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("sequence 0 requested, the dataset has 0"), std::string::npos) << s.message();
  check_numpy_agrees(prefix(), IndexedDType::kUInt16, {});
}

TEST_F(IndexedTest, OnlyEmptySequences) {
  std::vector<std::vector<uint32_t>> seqs(4);
  write_dataset(prefix(), IndexedDType::kInt32, seqs);
  check_reader_agrees(prefix(), IndexedDType::kInt32, seqs);
  check_numpy_agrees(prefix(), IndexedDType::kInt32, seqs);
}

TEST_F(IndexedTest, MultiSequenceDocuments) {
  IndexedWriter w;
  ASSERT_TRUE(w.open(prefix(), IndexedDType::kUInt16).is_ok());
  std::vector<uint32_t> a{1, 2}, b{3}, c{4, 5, 6};
  ASSERT_TRUE(w.add_sequence(a).is_ok());
  ASSERT_TRUE(w.add_sequence(b).is_ok());
  w.end_document();
  ASSERT_TRUE(w.add_sequence(c).is_ok());
  w.end_document();
  ASSERT_TRUE(w.finish().is_ok());
  IndexedDataset ds;
  ASSERT_TRUE(ds.open(prefix()).is_ok());
  EXPECT_EQ(ds.documents(), 2u);
  uint64_t b0, e0;
  ds.document_sequences(0, b0, e0);
  EXPECT_EQ(b0, 0u);
  EXPECT_EQ(e0, 2u);
  ds.document_sequences(1, b0, e0);
  EXPECT_EQ(b0, 2u);
  EXPECT_EQ(e0, 3u);
  json j = numpy_read(prefix());
  EXPECT_EQ(j["document_indices"], json::array({0, 2, 3}));
}

TEST_F(IndexedTest, UnfinishedDocumentIsRefused) {
  IndexedWriter w;
  ASSERT_TRUE(w.open(prefix(), IndexedDType::kUInt16).is_ok());
  std::vector<uint32_t> a{1};
  ASSERT_TRUE(w.add_sequence(a).is_ok());
  EXPECT_FALSE(w.finish().is_ok());
}

TEST_F(IndexedTest, IdTooLargeForDtype) {
  IndexedWriter w;
  ASSERT_TRUE(w.open(prefix(), IndexedDType::kUInt16).is_ok());
  std::vector<uint32_t> bad{1, 70000};
  Status s = w.add_document(bad);
  EXPECT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("70000"), std::string::npos) << s.message();
  EXPECT_EQ(w.bin_bytes(), 0u);
  w.abort();
  EXPECT_FALSE(fs::exists(prefix() + ".bin.partial"));
}

TEST_F(IndexedTest, RandomAccessTouchesOnlyWhatItReads) {
  // 2000 sequences of 3000 tokens (24 MB of int32); a few read in random order straight after
  // opening, each a span into the mapping at its recorded pointer (no other sequence is read).
  const int n = 2000, len = 3000;
  {
    IndexedWriter w;
    ASSERT_TRUE(w.open(prefix(), IndexedDType::kInt32).is_ok());
    std::vector<uint32_t> s(len);
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < len; ++j) s[j] = static_cast<uint32_t>(i * 1000 + j);
      ASSERT_TRUE(w.add_document(s).is_ok());
    }
    ASSERT_TRUE(w.finish().is_ok());
  }
  IndexedDataset ds;
  ASSERT_TRUE(ds.open(prefix()).is_ok());
  ASSERT_EQ(ds.sequences(), static_cast<uint64_t>(n));
  for (uint64_t i : {1777ull, 3ull, 1999ull, 0ull, 1024ull}) {
    TokenView v = ds.sequence(i);
    ASSERT_EQ(v.size(), static_cast<size_t>(len));
    ASSERT_EQ(v.i32.size(), static_cast<size_t>(len));  // a view into the mapping, not a copy
    EXPECT_EQ(v.at(0), i * 1000);
    EXPECT_EQ(v.at(len - 1), i * 1000 + len - 1);
    // the span points into the mapped .bin at the recorded pointer
    EXPECT_EQ(reinterpret_cast<uintptr_t>(v.i32.data()) % 4, 0u);
    TokenLocation loc = ds.locate(i * len + 17);
    EXPECT_EQ(loc.sequence, i);
    EXPECT_EQ(loc.offset, 17u);
  }
  // two views of the same sequence share memory
  EXPECT_EQ(ds.sequence(5).i32.data(), ds.sequence(5).i32.data());
  EXPECT_EQ(ds.sequence(6).i32.data() - ds.sequence(5).i32.data(), len);
}

TEST_F(IndexedTest, LocateSkipsEmptySequences) {
  write_dataset(prefix(), IndexedDType::kUInt16, {{1, 2}, {}, {}, {3}, {}, {4, 5}});
  IndexedDataset ds;
  ASSERT_TRUE(ds.open(prefix()).is_ok());
  EXPECT_EQ(ds.locate(0).sequence, 0u);
  EXPECT_EQ(ds.locate(1).sequence, 0u);
  EXPECT_EQ(ds.locate(2).sequence, 3u);
  EXPECT_EQ(ds.locate(3).sequence, 5u);
  EXPECT_EQ(ds.locate(4).sequence, 5u);
  EXPECT_EQ(ds.locate(4).offset, 1u);
}

TEST_F(IndexedTest, ResumeCutsBackToCheckpoint) {
  auto seqs = make_seqs({3, 4, 5, 6}, 0);
  IndexedWriter w;
  ASSERT_TRUE(w.open(prefix(), IndexedDType::kUInt16).is_ok());
  ASSERT_TRUE(w.add_document(seqs[0]).is_ok());
  ASSERT_TRUE(w.add_document(seqs[1]).is_ok());
  ASSERT_TRUE(w.sync().is_ok());
  uint64_t bytes = w.bin_bytes();
  auto lens = w.lengths();
  auto docs = w.document_indices();
  ASSERT_TRUE(w.add_document(make_seqs({50}, 7)[0]).is_ok());  // written after the checkpoint, lost
  ASSERT_TRUE(w.sync().is_ok());
  IndexedWriter w2;
  Status s = w2.resume(prefix(), IndexedDType::kUInt16, bytes, lens, docs);
  ASSERT_TRUE(s.is_ok()) << s.message();
  ASSERT_TRUE(w2.add_document(seqs[2]).is_ok());
  ASSERT_TRUE(w2.add_document(seqs[3]).is_ok());
  ASSERT_TRUE(w2.finish().is_ok());
  std::string resumed_bin = test::read_file(prefix() + ".bin"), resumed_idx = test::read_file(prefix() + ".idx");
  write_dataset(prefix("straight"), IndexedDType::kUInt16, seqs);
  EXPECT_EQ(resumed_bin, test::read_file(prefix("straight") + ".bin"));
  EXPECT_EQ(resumed_idx, test::read_file(prefix("straight") + ".idx"));
}

// ---- damaged files ----

std::string open_error(const std::string& prefix) {
  IndexedDataset ds;
  Status s = ds.open(prefix);
  EXPECT_FALSE(s.is_ok());
  return s.message();
}

class IndexedDamageTest : public IndexedTest {
 protected:
  void SetUp() override {
    IndexedTest::SetUp();
    write_dataset(prefix(), IndexedDType::kUInt16, make_seqs({3, 4, 5}, 0));
    idx_ = test::read_file(prefix() + ".idx");
    bin_ = test::read_file(prefix() + ".bin");
  }
  void write_idx(const std::string& s) { test::write_file(prefix() + ".idx", s); }
  void write_bin(const std::string& s) { test::write_file(prefix() + ".bin", s); }
  std::string idx_, bin_;
};

#define EXPECT_HAS(msg, part) EXPECT_NE((msg).find(part), std::string::npos) << (msg)

TEST_F(IndexedDamageTest, ShortIdxHeader) {
  write_idx(idx_.substr(0, 20));
  std::string m = open_error(prefix());
  EXPECT_HAS(m, prefix() + ".idx");
  EXPECT_HAS(m, "20 bytes, shorter than the 34-byte MMIDIDX header");
}

TEST_F(IndexedDamageTest, TruncatedIdxArrays) {
  write_idx(idx_.substr(0, idx_.size() - 5));
  std::string m = open_error(prefix());
  EXPECT_HAS(m, prefix() + ".idx");
  EXPECT_HAS(m, "truncated");
}

TEST_F(IndexedDamageTest, TrailingIdxBytes) {
  write_idx(idx_ + std::string(3, '\0'));
  EXPECT_HAS(open_error(prefix()), "3 more than its header");
}

TEST_F(IndexedDamageTest, BadMagicVersionDtype) {
  std::string s = idx_;
  s[0] = 'X';
  write_idx(s);
  EXPECT_HAS(open_error(prefix()), "offset 0: not an MMIDIDX index");
  s = idx_;
  s[9] = 2;
  write_idx(s);
  EXPECT_HAS(open_error(prefix()), "offset 9: version 2, expected 1");
  s = idx_;
  s[17] = 6;
  write_idx(s);
  EXPECT_HAS(open_error(prefix()), "offset 17: dtype code 6");
}

TEST_F(IndexedDamageTest, BadPointer) {
  std::string s = idx_;
  s[34 + 12 + 8] = 7;  // sequence_pointers[1] (low byte), was 6
  write_idx(s);
  std::string m = open_error(prefix());
  EXPECT_HAS(m, "offset 54: sequence_pointers[1] is 7, expected 6");
}

TEST_F(IndexedDamageTest, NegativeLength) {
  std::string s = idx_;
  int32_t neg = -1;
  std::memcpy(&s[34 + 4 * 2], &neg, 4);
  write_idx(s);
  EXPECT_HAS(open_error(prefix()), "offset 42: sequence_lengths[2] is -1");
}

TEST_F(IndexedDamageTest, BadDocumentIndices) {
  std::string s = idx_;
  s[34 + 36 + 8 * 3] = 2;  // document_indices[3] 3 -> 2
  write_idx(s);
  EXPECT_HAS(open_error(prefix()), "offset 94: the last document index is 2, expected the sequence count 3");
  s = idx_;
  s[34 + 36 + 8 * 1] = 5;  // document_indices[1] 1 -> 5 (beyond the sequence count)
  write_idx(s);
  EXPECT_HAS(open_error(prefix()), "offset 78: document_indices[1] is 5");
}

TEST_F(IndexedDamageTest, ShortBin) {
  write_bin(bin_.substr(0, bin_.size() - 2));
  std::string m = open_error(prefix());
  EXPECT_HAS(m, prefix() + ".bin: 22 bytes, but");
  EXPECT_HAS(m, "describes 24 (12 tokens); the .bin is truncated");
}

TEST_F(IndexedDamageTest, LongBin) {
  write_bin(bin_ + "xx");
  EXPECT_HAS(open_error(prefix()), "2 more than");
}

TEST_F(IndexedDamageTest, MissingFiles) {
  fs::remove(prefix() + ".bin");
  EXPECT_HAS(open_error(prefix()), prefix() + ".bin: cannot open");
  fs::remove(prefix() + ".idx");
  EXPECT_HAS(open_error(prefix()), prefix() + ".idx: cannot open");
}

TEST_F(IndexedDamageTest, NumpyReaderAlsoRejectsShortBin) {
  write_bin(bin_.substr(0, bin_.size() - 2));
  int rc = 0;
  json j = numpy_read(prefix(), &rc);
  EXPECT_NE(rc, 0) << j.dump();
}

}  // namespace
