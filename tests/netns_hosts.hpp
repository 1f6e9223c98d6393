// Hosts for tests made of Linux network namespaces (needs root): a hub namespace holds a bridge
// br0 at 10.77.0.254/24 and runs mpirun; host k is a namespace whose eth0 (10.77.0.k/24) is one
// end of a veth pair, the other end (vhK) attached to br0 in the hub. mpirun reaches each host
// through an rsh agent script (`AGENT HOST COMMAND...` runs COMMAND in HOST's namespace), so the
// ranks of different hosts talk over real TCP, on one machine. Each NetnsHosts has names of its
// own (the process id and a counter), so parallel tests do not collide; 10.77.0.0/24 lives inside
// each hub. Not product code.
//
// What Open MPI 4.1.4's mpirun prints here (measured 2026-12-06; 2 hosts x 2 ranks; `smelt train`
// and `sleep` as the program gave the same texts). Node names: the IP --host gave for a remote
// host, "vm" (the machine's hostname, which every namespace shares) for mpirun's own side.
// (a) A rank on host 2 SIGKILLed: mpirun exits 137 about 2 s later, having printed
//       Primary job  terminated normally, but 1 process returned
//       a non-zero exit code. Per user-direction, the job has been aborted.
//       mpirun noticed that process rank 2 with PID 9846 on node 10.77.0.2 exited on signal 9 (Killed).
//     (inside '-' rule boxes). Under MPI the surviving ranks may first print "An MPI communication
//     peer process has unexpectedly disconnected. ... Local host: vm / Local PID: 9851 / Peer host:
//     10.77.0.2", and at the end "[vm:09831] 2 more processes have sent help message
//     help-mpi-btl-tcp.txt / peer hung up".
// (b) Host 2's link set down while a job runs: mpirun prints nothing until its TCP keepalive to
//     host 2's daemon gives up (oob_tcp_keepalive_time 300 + intvl 20 x probes 9): by default it
//     exited 205 (sic) 497 s after the link went down (nothing within 140 s, even after the job's
//     own MPI_Abort); with `--mca oob_tcp_keepalive_time 5 --mca oob_tcp_keepalive_intvl 1
//     --mca oob_tcp_keepalive_probes 3`, 8 s after. Either way it printed
//       ORTE has lost communication with a remote daemon.
//         HNP daemon   : [[18696,0],0] on node vm
//         Remote daemon: [[18696,0],2] on node 10.77.0.2
//       This is usually due to either a failure of the TCP network
//       connection to the node, or possibly an internal failure of
//       the daemon itself. We cannot recover from this failure, and
//       therefore will terminate the job.
//     `smelt train --set dist.timeout_s=10` itself notices first ("[dist] rank 0 of 4: all-reduce
//     (alltoallv) waited 10 s for the other ranks ... ending the job", then MPI_ABORT's box), but
//     mpirun still waits for host 2's daemon. A mpirun killed before then leaves host 2's daemon
//     and ranks running (they never hear of it): ~NetnsHosts kills what runs in its namespaces.
// (c) A job started with host 2's link already down: mpirun exits 1 after about 3.4 s, no rank
//     started, having printed (sometimes after two "[vm:PID] PMIX ERROR: ERROR in file
//     ../../../../../../src/mca/common/dstore/dstore_base.c at line 1709" lines)
//       A process or daemon was unable to complete a TCP connection
//       to another process:
//         Local host:    vm
//         Remote host:   vm
//       ...
//       ORTE was unable to reliably start one or more daemons.
//     (both boxed; the second goes on with a list of causes). It names no host: the daemon of
//     host 2 did start (the agent needs no network) but could not call back to mpirun.
#pragma once
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace smelt::test {

// Runs `cmd` under sh; its stdout and stderr go to `out`. True when it exits 0.
inline bool netns_run(const std::string& cmd, std::string& out) {
  out.clear();
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return false;
  char buf[512];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  return pclose(p) == 0;
}

// Whether NetnsHosts can work here: root, `ip` present, and a trial namespace with a bridge and a
// veth pair in it. `why` says what refused.
inline bool netns_available(std::string& why) {
  std::string out;
  if (geteuid() != 0) return why = "network namespaces need root", false;
  if (!netns_run("command -v ip", out)) return why = "no `ip` command (iproute2)", false;
  const std::string ns = "smnet" + std::to_string(getpid()) + "_probe";
  const bool ok = netns_run("ip netns add " + ns + " && ip -n " + ns + " link add br0 type bridge && ip -n " + ns +
                                " link add va type veth peer name vb",
                            out);
  std::string ignored;
  netns_run("ip netns del " + ns, ignored);
  if (!ok) why = "a trial network namespace failed: " + out;
  return ok;
}

// N hosts as network namespaces, removed (with any process left in them) when this goes.
class NetnsHosts {
 public:
  NetnsHosts() : tag_("smnet" + std::to_string(getpid()) + "_" + std::to_string(next_id()++)) {}
  ~NetnsHosts() { remove(); }
  NetnsHosts(const NetnsHosts&) = delete;
  NetnsHosts& operator=(const NetnsHosts&) = delete;

  // Makes the hub and `hosts` hosts (1 to 253), the agent script in `dir`. On failure nothing is
  // left and `why` says which command failed and how.
  bool create(int hosts, const std::filesystem::path& dir, std::string& why) {
    remove_stale();
    bool ok = hosts >= 1 && hosts <= 253 && add_ns(hub(), why) &&
              run("ip -n " + hub() + " link add br0 type bridge && ip -n " + hub() +
                      " addr add 10.77.0.254/24 dev br0 && ip -n " + hub() + " link set br0 up",
                  why);
    for (int k = 1; ok && k <= hosts; k++) ok = add_host(k, why);
    if (ok) ok = write_agent(dir, hosts, why);
    if (!ok) remove();
    return ok;
  }

  std::string hub() const { return tag_ + "_hub"; }
  std::string host_ns(int k) const { return tag_ + "_h" + std::to_string(k); }
  static std::string host_ip(int k) { return "10.77.0." + std::to_string(k); }
  int hosts() const { return hosts_; }
  // A prefix that runs a command in the hub: where mpirun must run.
  std::string exec_in_hub() const { return "ip netns exec " + hub() + " "; }
  // "10.77.0.1:S,10.77.0.2:S,...": mpirun's --host with `slots` ranks on each host.
  std::string hosts_arg(int slots) const {
    std::string s;
    for (int k = 1; k <= hosts_; k++) s += (k > 1 ? "," : "") + host_ip(k) + ":" + std::to_string(slots);
    return s;
  }
  // mpirun's options for these hosts: the agent, TCP on the hub's subnet only, root, oversubscribed.
  std::string mpirun_args() const {
    return "--mca plm_rsh_agent " + agent_.string() +
           " --mca oob_tcp_if_include 10.77.0.0/24 --mca btl_tcp_if_include 10.77.0.0/24 --mca btl self,tcp"
           " --allow-run-as-root --oversubscribe";
  }
  // The whole mpirun command up to the program: `ip netns exec HUB mpirun --host ... OPTIONS`.
  std::string mpirun(int slots) const { return exec_in_hub() + "mpirun --host " + hosts_arg(slots) + " " + mpirun_args(); }

  // Host k's link (its veth's hub end) down or up.
  bool link(int k, bool up) {
    std::string out;
    return run("ip -n " + hub() + " link set vh" + std::to_string(k) + (up ? " up" : " down"), out);
  }
  // Host k's traffic both ways limited to `rate` (tc's units: "10mbit"), by a token bucket.
  bool slow(int k, const std::string& rate) {
    std::string out;
    const std::string tbf = " root tbf rate " + rate + " burst 32kbit latency 400ms";
    return run("ip netns exec " + hub() + " tc qdisc replace dev vh" + std::to_string(k) + tbf, out) &&
           run("ip netns exec " + host_ns(k) + " tc qdisc replace dev eth0" + tbf, out);
  }

 private:
  static int& next_id() {
    static int id = 0;
    return id;
  }
  // `cmd`, its output in `why` (prefixed by the command) when it fails.
  static bool run(const std::string& cmd, std::string& why) {
    std::string out;
    if (netns_run(cmd, out)) return true;
    why = cmd + ": " + out;
    return false;
  }
  bool add_ns(const std::string& ns, std::string& why) {
    if (!run("ip netns add " + ns, why)) return false;
    made_.push_back(ns);
    return run("ip -n " + ns + " link set lo up", why);
  }
  bool add_host(int k, std::string& why) {
    const std::string ns = host_ns(k), vh = "vh" + std::to_string(k), h = "ip -n " + hub();
    if (!add_ns(ns, why)) return false;
    hosts_ = k;
    return run(h + " link add " + vh + " type veth peer name eth0 netns " + ns + " && " + h + " link set " + vh +
                   " master br0 && " + h + " link set " + vh + " up && ip -n " + ns + " addr add " + host_ip(k) +
                   "/24 dev eth0 && ip -n " + ns + " link set eth0 up",
               why);
  }
  // The rsh agent mpirun calls as `AGENT HOST COMMAND...`.
  bool write_agent(const std::filesystem::path& dir, int hosts, std::string& why) {
    agent_ = dir / (tag_ + "_agent.sh");
    std::ofstream f(agent_);
    f << "#!/bin/sh\n# mpirun's rsh agent for " << tag_ << ": HOST COMMAND... runs COMMAND in HOST's namespace\n"
      << "h=$1; shift\ncase \"$h\" in\n";
    // Each host its own TMPDIR, as real hosts have their own /tmp: the namespaces share the hostname
    // and /tmp, and two Open MPI daemons making the same session folder (/tmp/ompi.HOST.UID/jf.N)
    // at once failed a start now and then ("File exists").
    for (int k = 1; k <= hosts; k++)
      f << "  " << host_ip(k) << ") ns=" << host_ns(k) << "; tmp=" << (dir / (tag_ + "_tmp" + std::to_string(k))).string()
        << ";;\n";
    f << "  *) echo \"netns agent: unknown host $h\" >&2; exit 1;;\nesac\n"
      << "mkdir -p \"$tmp\"\nexec ip netns exec \"$ns\" env TMPDIR=\"$tmp\" sh -c \"$*\"\n";
    f.close();
    std::error_code ec;
    std::filesystem::permissions(agent_, std::filesystem::perms::owner_all, std::filesystem::perm_options::add, ec);
    if (!f || ec) why = "cannot write " + agent_.string();
    return f && !ec;
  }
  // Every namespace made, newest first, after killing what still runs in it; then the script.
  void remove() {
    std::string out;
    for (auto it = made_.rbegin(); it != made_.rend(); ++it)
      netns_run("ip netns pids " + *it + " | xargs -r kill -9; ip netns del " + *it, out);
    made_.clear();
    hosts_ = 0;
    std::error_code ec;
    if (!agent_.empty()) std::filesystem::remove(agent_, ec);
  }
  // Namespaces of an earlier test process that died before its destructor ran (smnetPID_...).
  static void remove_stale() {
    std::string list, out;
    netns_run("ip netns list", list);
    std::istringstream in(list);
    for (std::string ns; in >> ns;) {
      if (ns.rfind("smnet", 0) != 0) continue;
      const int pid = std::atoi(ns.c_str() + 5);
      if (pid > 0 && kill(pid, 0) != 0 && errno == ESRCH)
        netns_run("ip netns pids " + ns + " | xargs -r kill -9; ip netns del " + ns, out);
    }
  }

  std::string tag_;
  std::vector<std::string> made_;
  std::filesystem::path agent_;
  int hosts_ = 0;
};

}  // namespace smelt::test
