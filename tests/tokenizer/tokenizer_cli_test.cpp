// `smelt tokenizer encode|decode` as a user runs it: both formats, line and whole-file documents,
// identical output for any thread count, blocks that split long inputs, exact round trips, the
// ids the library (checked against tiktoken/HF in tokenizer_test) gives, output into a FIFO, and
// exit codes.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include "smelt/tokenizer/tokenizer.hpp"
#include "tok_test_util.hpp"
#include "test_references.hpp"

namespace smelt {
namespace {

using namespace smelt::test;

std::string tmpdir() {
  static std::string d = [] {
    std::string p = std::filesystem::temp_directory_path().string() + "/smelt-tokcli-" + std::to_string(getpid());
    std::filesystem::create_directories(p);
    return p;
  }();
  return d;
}

int run(const std::string& args) {
  int rc = std::system((std::string(SMELT_BINARY) + " tokenizer " + args + " 2>" + tmpdir() + "/stderr.txt").c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

std::vector<uint32_t> read_bin(const std::string& p) {
  std::string s = read_file(p);
  std::vector<uint32_t> v(s.size() / 4);
  std::memcpy(v.data(), s.data(), v.size() * 4);
  return v;
}

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    SMELT_REQUIRE_REFERENCE(refs_installed(), "npm references (fixtures are built from them): scripts/install-deps");
    tok_ = fixtures() + "/cl100k_base.tiktoken";
    ASSERT_TRUE(Tokenizer::load(tok_, lib_));
  }
  // expected bin output, from the library
  std::vector<uint32_t> expect_bin(const std::string& text, bool whole) {
    std::vector<uint32_t> out;
    std::vector<std::string> docs;
    if (whole) {
      docs = {text};
    } else {
      docs = docs_of(text, false);
      if (!text.empty() && text.back() != '\n') {}  // docs_of already keeps a last line without '\n'
    }
    for (const auto& d : docs) {
      lib_.encode(d, out);
      out.push_back(0xFFFFFFFFu);
    }
    return out;
  }
  std::string tok_;
  Tokenizer lib_;
};

TEST_F(Cli, RoundTripsAndThreadCounts) {
  std::string big;
  for (const auto& f : sample_files()) big += read_file(std::string(SMELT_TEST_DATA) + "/tokenizer/" + f) + "\n";
  std::string long_line(3 << 20, 'a');  // one line longer than a block
  for (size_t i = 0; i < long_line.size(); i += 7) long_line[i] = ' ';
  std::vector<std::pair<std::string, std::string>> inputs = {
      {"real", big},
      {"real_no_final_newline", big + "last line"},
      {"blank_lines", "a\n\n\nb\n\n"},
      {"only_newline", "\n"},
      {"empty", ""},
      {"crlf", "one\r\ntwo\r\n\r\n"},
      {"long", long_line + "\nshort\n" + long_line.substr(0, 1000) + "\n"},
      {"specials", "x<|endoftext|>y\n<|fim_prefix|>\n"},
  };
  for (auto& [name, text] : inputs) {
    std::string in = tmpdir() + "/" + name + ".txt";
    write_file(in, text);
    for (bool whole : {false, true}) {
      std::string w = whole ? " --whole" : "";
      std::vector<uint32_t> want = expect_bin(text, whole);
      std::string first_text;
      for (int th : {1, 2, 4}) {
        std::string ob = tmpdir() + "/o.bin", ot = tmpdir() + "/o.txt", back = tmpdir() + "/back.txt";
        ASSERT_EQ(run("encode -t " + tok_ + " -i " + in + " -o " + ob + " --threads " + std::to_string(th) + w), 0) << name;
        EXPECT_EQ(read_bin(ob), want) << name << w << " threads " << th;
        ASSERT_EQ(run("encode -t " + tok_ + " -i " + in + " -o " + ot + " --format text --threads " + std::to_string(th) + w), 0);
        std::string t = read_file(ot);
        if (th == 1) first_text = t;
        EXPECT_EQ(t, first_text) << name << w << " threads " << th;
        // the text format is the same ids
        std::vector<uint32_t> parsed;
        for (const auto& line : docs_of(t, false)) {
          std::stringstream ss(line);
          uint32_t v;
          while (ss >> v) parsed.push_back(v);
          parsed.push_back(0xFFFFFFFFu);
        }
        EXPECT_EQ(parsed, want) << name << w;
        // decode reverses both formats: a line per document (lines mode), the document as is (--whole)
        std::string expect_back = whole || text.empty() || text.back() == '\n' ? text : text + "\n";
        ASSERT_EQ(run("decode -t " + tok_ + " -i " + ob + " -o " + back + w), 0);
        EXPECT_EQ(read_file(back), expect_back) << name << w;
        ASSERT_EQ(run("decode -t " + tok_ + " -i " + ot + " -o " + back + " --format text" + w), 0);
        EXPECT_EQ(read_file(back), expect_back) << name << w;
      }
    }
  }
}

// An output path that is a FIFO or a device (e.g. -o /dev/null) is written straight, never
// replaced by an atomic rename.
TEST_F(Cli, WritesIntoAFifoWithoutReplacingIt) {
  std::string in = tmpdir() + "/fifo-in.txt", fifo = tmpdir() + "/pipe", got = tmpdir() + "/from-pipe.bin";
  write_file(in, "Hello world\n\u4e2d\u6587\n");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  std::string cmd = "timeout 60 cat " + fifo + " > " + got + " & " + SMELT_BINARY + " tokenizer encode -t " + tok_ + " -i " + in +
                    " -o " + fifo + " 2>" + tmpdir() + "/stderr.txt; rc=$?; wait; exit $rc";
  int rc = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 0) << read_file(tmpdir() + "/stderr.txt");
  EXPECT_TRUE(std::filesystem::is_fifo(fifo));
  EXPECT_EQ(read_bin(got), expect_bin(read_file(in), false));
  std::filesystem::remove(fifo);
}

TEST_F(Cli, ExitCodes) {
  std::string in = tmpdir() + "/x.txt";
  write_file(in, "hello\n");
  EXPECT_EQ(run(""), 2);
  EXPECT_EQ(run("frobnicate"), 2);
  EXPECT_EQ(run("encode -i " + in + " -o /dev/null"), 2);                    // no tokenizer
  EXPECT_EQ(run("encode -t /nonexistent.json -i " + in + " -o /dev/null"), 2);
  EXPECT_EQ(run("encode -t " + tok_ + " -i /nonexistent.txt -o " + tmpdir() + "/y"), 2);
  EXPECT_EQ(run("encode -t " + tok_ + " -i " + in + " -o " + tmpdir() + "/y --format xml"), 2);
  write_file(tmpdir() + "/bad.txt", "1 2 99999999\n");
  EXPECT_EQ(run("decode -t " + tok_ + " -i " + tmpdir() + "/bad.txt -o " + tmpdir() + "/z --format text"), 1);
  EXPECT_NE(read_file(tmpdir() + "/stderr.txt").find("line 1"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(tmpdir() + "/z"));  // no half-written output
  write_file(tmpdir() + "/bad.bin", "abc");
  EXPECT_EQ(run("decode -t " + tok_ + " -i " + tmpdir() + "/bad.bin -o " + tmpdir() + "/z"), 1);
  EXPECT_EQ(run("encode --help"), 0);
}

}  // namespace
}  // namespace smelt
