// failure_classify on what a failed job prints: Open MPI 4.1's mpirun notices (captured from real
// runs: a rank killed by SIGKILL, a rank's exit 3), srun's task lines, smelt's own hang and
// memory-ceiling messages, and the bare exit status when nothing names a rank.
#include <signal.h>

#include <gtest/gtest.h>

#include "smelt/launch/failure.hpp"

using namespace smelt;

namespace {

const char* kMpirunSignal =
    "--------------------------------------------------------------------------\n"
    "Primary job  terminated normally, but 1 process returned\n"
    "a non-zero exit code. Per user-direction, the job has been aborted.\n"
    "--------------------------------------------------------------------------\n"
    "--------------------------------------------------------------------------\n"
    "mpirun noticed that process rank 1 with PID 0 on node vm exited on signal 9 (Killed).\n"
    "--------------------------------------------------------------------------\n";

const char* kMpirunExit =
    "--------------------------------------------------------------------------\n"
    "mpirun detected that one or more processes exited with non-zero status, thus causing\n"
    "the job to be terminated. The first process to do so was:\n"
    "\n"
    "  Process name: [[24639,1],1]\n"
    "  Exit code:    3\n"
    "--------------------------------------------------------------------------\n";

const char* kHang =
    "[train] step 7/60 | loss 5.1\n"
    "[dist] rank 0 of 2: the gradient reduction waited 3 s for the other ranks ([dist] timeout_s = 3); rank 1 "
    "(host node07) never reached step 8's gradient reduction (hung or gone): ending the job (relaunch with --resume)\n"
    "MPI_ABORT was invoked on rank 0 in communicator MPI_COMM_WORLD\nwith errorcode 1.\n";

}  // namespace

TEST(FailureClassify, MpirunNamesTheKilledRankItsHostAndSignal) {
  Failure f = failure_classify(137, 0, false, "", kMpirunSignal);
  EXPECT_EQ(f.cause, "killed");
  EXPECT_EQ(f.rank, 1);
  EXPECT_EQ(f.host, "vm");
  EXPECT_EQ(f.signal, 9);
  EXPECT_NE(f.detail.find("exited on signal 9"), std::string::npos) << f.detail;
}

TEST(FailureClassify, MpirunNamesTheRankThatExitedNonZero) {
  Failure f = failure_classify(3, 0, false, "", kMpirunExit);
  EXPECT_EQ(f.cause, "exit");
  EXPECT_EQ(f.rank, 1);
  EXPECT_EQ(f.exit_code, 3);
}

TEST(FailureClassify, SmeltsHangMessageWinsOverMpirunsAbortNotice) {
  Failure f = failure_classify(1, 0, false, "", std::string(kMpirunExit) + kHang);
  EXPECT_EQ(f.cause, "hang");
  EXPECT_EQ(f.rank, 1);
  EXPECT_EQ(f.host, "node07");
  EXPECT_NE(f.detail.find("never reached step 8"), std::string::npos) << f.detail;
}

TEST(FailureClassify, AHangWithNoRankNamedIsStillAHangAndAnAbortNamesItsRank) {
  Failure f = failure_classify(1, 0, false, "",
                               "[dist] rank 1 of 2: the barrier waited 4 s for the other ranks ([dist] timeout_s = 4); a "
                               "rank is hung or gone: ending the job (relaunch with --resume)\n"
                               "MPI_ABORT was invoked on rank 1 in communicator MPI_COMM_WORLD\nwith errorcode 1.\n");
  EXPECT_EQ(f.cause, "hang");
  EXPECT_EQ(f.rank, -1);
  f = failure_classify(1, 0, false, "", "MPI_ABORT was invoked on rank 3 in communicator MPI_COMM_WORLD\nwith errorcode 1.\n");
  EXPECT_EQ(f.cause, "exit");
  EXPECT_EQ(f.rank, 3);
}

TEST(FailureClassify, MemoryCeilingNamesTheRank) {
  Failure f = failure_classify(1, 0, false, "",
                               "[train] memory ceiling: rank 3 (host n2) resident 2600 MiB passed the ceiling 2400 MiB\n");
  EXPECT_EQ(f.cause, "memory");
  EXPECT_EQ(f.rank, 3);
  EXPECT_EQ(f.host, "n2");
}

TEST(FailureClassify, AFullDiskAtASave) {
  // what smelt train printed when its run folder was a 600 KiB tmpfs, then mpirun's notice
  Failure f = failure_classify(1, 0, false, "",
                               "[train] checkpoint: background checkpoint save of step 2 failed: "
                               "run/checkpoints/step_00000002.tmp/rank-00000.safetensors: write failed at byte 606208: "
                               "No space left on device\n" + std::string(kMpirunExit));
  EXPECT_EQ(f.cause, "disk");
  EXPECT_NE(f.detail.find("step 2"), std::string::npos) << f.detail;
  EXPECT_EQ(failure_classify(1, 0, false, "", "[train] checkpoint at step 8: commit: Disk quota exceeded\n").cause, "disk");
  // the disk-rate probe's note is not a failure of its own
  EXPECT_EQ(failure_classify(1, 0, false, "", "[train] run/.disk-probe: measuring the disk's write rate failed (No space "
                                              "left on device); checkpoint bandwidth is not judged\n").cause, "exit");
}

TEST(FailureClassify, SrunTaskLines) {
  Failure f = failure_classify(1, 0, false, "", "srun: error: node12: task 3: Exited with exit code 1\n");
  EXPECT_EQ(f.cause, "exit");
  EXPECT_EQ(f.rank, 3);
  EXPECT_EQ(f.host, "node12");
  f = failure_classify(137, 0, false, "", "srun: error: node05: task 0: Killed\n");
  EXPECT_EQ(f.cause, "killed");
  EXPECT_EQ(f.rank, 0);
  EXPECT_EQ(f.signal, SIGKILL);
}

TEST(FailureClassify, ALostDaemonIsTheHostsFailure) {
  Failure f = failure_classify(1, 0, false, "",
                               "ORTE has lost communication with a remote daemon.\n\n  HNP daemon   : [[1,0],0] on node "
                               "10.77.0.254\n  Remote daemon: [[1,0],2] on node 10.77.0.2\n\nThis is usually due to ...\n");
  EXPECT_EQ(f.cause, "launch");
  EXPECT_EQ(f.host, "10.77.0.2");
}

TEST(FailureClassify, StallUsageSuccessAndBareStatus) {
  EXPECT_EQ(failure_classify(-1, SIGKILL, true, "no new step line", kMpirunSignal).cause, "stall");
  EXPECT_EQ(failure_classify(2, 0, false, "", kMpirunExit).cause, "usage");  // a restart cannot mend it
  EXPECT_EQ(failure_classify(0, 0, false, "", kHang).cause, "");
  Failure f = failure_classify(-1, SIGSEGV, false, "", "nothing useful\n");
  EXPECT_EQ(f.cause, "killed");
  EXPECT_EQ(f.signal, SIGSEGV);
  EXPECT_EQ(f.rank, -1);
  f = failure_classify(1, 0, false, "", "error: something\n");
  EXPECT_EQ(f.cause, "exit");
  EXPECT_EQ(f.exit_code, 1);
}
