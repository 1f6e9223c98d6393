// The two executables (src/smelt/cli/main.cpp, full_main.cpp): the light `smelt` loads none of
// MPI, OpenBLAS, OpenMP or oneDNN (its ELF dynamic section, read here from the ELF spec's structures),
// and for the heavy commands it becomes `smelt-full` in the same process: output, exit codes and
// signals pass through, and a missing smelt-full is named in a clear error.
#include <elf.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "test_files.hpp"

namespace fs = std::filesystem;

namespace {

// DT_NEEDED entries of an ELF64 little-endian file: the SHT_DYNAMIC section's entries, their
// names in the string table its sh_link names (System V ABI, "Dynamic Section").
std::vector<std::string> elf_needed(const std::string& path) {
  const std::string f = smelt::test::read_file(path);
  std::vector<std::string> out;
  if (f.size() < sizeof(Elf64_Ehdr) || std::memcmp(f.data(), ELFMAG, SELFMAG) || f[EI_CLASS] != ELFCLASS64) {
    ADD_FAILURE() << path << ": not an ELF64 file";
    return out;
  }
  Elf64_Ehdr eh;
  std::memcpy(&eh, f.data(), sizeof eh);
  auto section = [&](size_t i) {
    Elf64_Shdr sh;
    std::memcpy(&sh, f.data() + eh.e_shoff + i * eh.e_shentsize, sizeof sh);
    return sh;
  };
  for (size_t i = 0; i < eh.e_shnum; i++) {
    Elf64_Shdr dyn = section(i);
    if (dyn.sh_type != SHT_DYNAMIC) continue;
    Elf64_Shdr str = section(dyn.sh_link);
    for (size_t off = 0; off + sizeof(Elf64_Dyn) <= dyn.sh_size; off += sizeof(Elf64_Dyn)) {
      Elf64_Dyn d;
      std::memcpy(&d, f.data() + dyn.sh_offset + off, sizeof d);
      if (d.d_tag == DT_NULL) break;
      if (d.d_tag == DT_NEEDED) out.emplace_back(f.data() + str.sh_offset + d.d_un.d_val);
    }
  }
  return out;
}

bool needs(const std::vector<std::string>& needed, const std::string& prefix) {
  for (const auto& n : needed)
    if (n.rfind(prefix, 0) == 0) return true;
  return false;
}

struct CmdRun {
  int rc;
  std::string out, err;
};

CmdRun run(const std::string& binary, const std::string& args, const fs::path& dir) {
  const std::string out = (dir / "stdout.txt").string(), err = (dir / "stderr.txt").string();
  int st = std::system((binary + " " + args + " > " + out + " 2> " + err + " < /dev/null").c_str());
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, smelt::test::read_file(out), smelt::test::read_file(err)};
}

class SmeltBinaries : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("smelt_main_test_" + std::to_string(getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

}  // namespace

TEST_F(SmeltBinaries, LightBinaryLoadsNoHeavyLibrary) {
  const auto light = elf_needed(SMELT_BINARY), full = elf_needed(SMELT_FULL_BINARY);
  // The reader sees them where they are: the full binary links MPI and OpenBLAS.
  EXPECT_TRUE(needs(full, "libmpi")) << testing::PrintToString(full);
  EXPECT_TRUE(needs(full, "libopenblas")) << testing::PrintToString(full);
  ASSERT_TRUE(needs(light, "libc.so")) << testing::PrintToString(light);
  for (const char* heavy : {"libmpi", "libopenblas", "libgomp", "libdnnl", "libgfortran"})
    EXPECT_FALSE(needs(light, heavy)) << heavy << " in " << testing::PrintToString(light);
}

TEST_F(SmeltBinaries, HeavyCommandsRunThroughTheFullBinary) {
  CmdRun help = run(SMELT_BINARY, "train --help", dir_);
  EXPECT_EQ(help.rc, 0) << help.err;
  EXPECT_NE(help.out.find("--config"), std::string::npos) << help.out;
  EXPECT_EQ(help.out, run(SMELT_FULL_BINARY, "train --help", dir_).out);
  // Exit codes pass through unchanged: usage (2), failure (1), and the same for every command.
  const std::string missing = (dir_ / "missing").string();
  EXPECT_EQ(run(SMELT_BINARY, "train --config " + missing + ".toml", dir_).rc, 2);
  EXPECT_EQ(run(SMELT_BINARY, "ckpt verify " + missing, dir_).rc,
            run(SMELT_FULL_BINARY, "ckpt verify " + missing, dir_).rc);
  for (const char* args : {"eval", "generate", "export", "pipeline", "ckpt", "train --no-such-flag"}) {
    EXPECT_EQ(run(SMELT_BINARY, args, dir_).rc, run(SMELT_FULL_BINARY, args, dir_).rc) << args;
    EXPECT_NE(run(SMELT_BINARY, args, dir_).rc, 0) << args;
  }
  // The light commands and the usage stay in the light binary, the same as in the full one.
  EXPECT_EQ(run(SMELT_BINARY, "--help", dir_).out, run(SMELT_FULL_BINARY, "--help", dir_).out);
  EXPECT_EQ(run(SMELT_BINARY, "no-such-command", dir_).rc, 2);
  EXPECT_EQ(run(SMELT_BINARY, "tokenizer encode --help", dir_).rc, 0);
}

// `smelt --version` names the version CMakeLists.txt declares and a commit of this checkout (the
// one the build saw: HEAD when the build came after the last commit), the same from both binaries.
TEST_F(SmeltBinaries, VersionNamesTheProjectVersionAndTheSourceCommit) {
  const std::string cmake = smelt::test::read_file(std::string(SMELT_SOURCE_DIR) + "/CMakeLists.txt");
  const size_t at = cmake.find("project(smelt VERSION ");
  ASSERT_NE(at, std::string::npos);
  const size_t from = at + 22;
  const std::string version = cmake.substr(from, cmake.find(' ', from) - from);
  CmdRun v = run(SMELT_BINARY, "--version", dir_);
  EXPECT_EQ(v.rc, 0) << v.err;
  const std::string head = "smelt " + version + " (commit ";
  ASSERT_EQ(v.out.rfind(head, 0), 0u) << v.out;
  const std::string commit = v.out.substr(head.size(), v.out.find(',') - head.size());
  EXPECT_NE(v.out.find(", built with GCC "), std::string::npos) << v.out;
  int rc = 0;
  smelt::test::run_command(std::string("git -C ") + SMELT_SOURCE_DIR + " rev-parse --git-dir > /dev/null 2>&1", rc);
  if (rc == 0) {  // a checkout: the commit is a real one of it, abbreviated to 12 digits
    EXPECT_EQ(commit.size(), 12u) << v.out;
    smelt::test::run_command(
        std::string("git -C ") + SMELT_SOURCE_DIR + " cat-file -e " + commit + "^{commit} 2>/dev/null", rc);
    EXPECT_EQ(rc, 0) << commit << " is not a commit of " << SMELT_SOURCE_DIR;
  } else {
    EXPECT_EQ(commit, "unknown") << v.out;
  }
  EXPECT_EQ(v.out, run(SMELT_FULL_BINARY, "--version", dir_).out);
  EXPECT_NE(run(SMELT_BINARY, "--help", dir_).out.find("'smelt --version'"), std::string::npos);
}

TEST_F(SmeltBinaries, FullBinaryRunsInTheSameProcessAndGetsItsSignals) {
  // `train --config FIFO` blocks opening the FIFO before it installs its SIGTERM handler, so the
  // signal ends it by default: the status the parent sees must say SIGTERM.
  const fs::path fifo = dir_ / "config.toml";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(open("/dev/null", O_WRONLY), 2);
    execl(SMELT_BINARY, "smelt", "train", "--config", fifo.c_str(), (char*)nullptr);
    _exit(127);
  }
  ASSERT_GT(pid, 0);
  std::string exe;
  for (int i = 0; i < 2000 && exe.find("smelt-full") == std::string::npos; i++) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::error_code ec;
    exe = fs::read_symlink("/proc/" + std::to_string(pid) + "/exe", ec).string();
  }
  EXPECT_EQ(fs::path(exe).filename(), "smelt-full") << "pid " << pid << " runs " << exe;
  kill(pid, SIGTERM);
  int st = 0;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(st)) << "status " << st;
  EXPECT_EQ(WTERMSIG(st), SIGTERM);
}

TEST_F(SmeltBinaries, MissingFullBinaryIsNamed) {
  const fs::path alone = dir_ / "bin" / "smelt";
  fs::create_directories(alone.parent_path());
  fs::copy_file(SMELT_BINARY, alone);
  CmdRun r = run(alone.string(), "train --help", dir_);
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find((dir_ / "bin" / "smelt-full").string()), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("missing"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");
  // The light commands need nothing beside it.
  EXPECT_EQ(run(alone.string(), "tokenizer encode --help", dir_).rc, 0);
  EXPECT_EQ(run(alone.string(), "trace summary --help", dir_).rc, 0);
}
