//! The local cluster the tests start (slurm/local-dynmig.sh) and what they read from it:
//! Slurm's JSON, `scontrol show` fields, the nodes' simulated GPUs, users made for the tests.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;
use std::time::{Duration, Instant};

static ONE_CLUSTER_AT_A_TIME: Mutex<()> = Mutex::new(());

pub struct Cluster {
    pub root: PathBuf,
    pub dir: PathBuf,
    pub slurm_conf: String,
    /// Jobs the test expects to stay pending (see [`Cluster::expect_pending`]).
    expected_pending: std::cell::RefCell<Vec<u64>>,
    /// When the test took the cluster (before it came up), for `.run/cluster-test-times.tsv`.
    started: Instant,
    _lock: std::sync::MutexGuard<'static, ()>,
    _machine_lock: std::fs::File,
}

/// How long a job may stay pending, not held, before the harness's invariant fails the test
/// ([`Cluster::stuck_jobs`]): longer than any repartition or requeue delay of the suite.
pub const STUCK_AFTER: Duration = Duration::from_secs(180);

/// One instance of a node: GPU index, profile, device files.
pub type NodeInstance = (usize, String, Vec<PathBuf>);

/// Gives nodes n1 and n2 fresh NVML stand-ins under `nvml_dir` (two A100-80GB with MIG on,
/// the driver's files under each node's `root`), or, with `install` false, none.
pub fn install_standins(nvml_dir: &Path, install: bool) {
    let _ = std::fs::remove_dir_all(nvml_dir);
    if !install {
        return;
    }
    for node in ["n1", "n2"] {
        let mut spec = nvml_standin::NodeSpec::new("A100-80GB", 2);
        spec.mig_enabled = true;
        spec.device_root = Some(nvml_dir.join(node).join("root"));
        nvml_standin::StandIn::install(&nvml_dir.join(node), &spec)
            .unwrap_or_else(|e| panic!("NVML stand-in for {node}: {e}"));
    }
}

pub fn bin_dir() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_dynmig")).parent().unwrap().to_path_buf()
}

impl Cluster {
    pub fn up(with_controller: bool) -> Self {
        Self::up_with(with_controller, &[])
    }

    /// [`Cluster::up`] with more environment for slurm/local-dynmig.sh.
    pub fn up_with(with_controller: bool, env: &[(&str, &str)]) -> Self {
        let lock = ONE_CLUSTER_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        // Other test processes (another `cargo test` run) use the same namespaces and
        // directory: hold a machine-wide lock for the whole test, not only while starting.
        let machine_lock = std::fs::File::create("/run/dynmig-cluster-tests.lock").expect("create the test lock");
        fs4::FileExt::lock(&machine_lock).expect("take the test lock");
        let started = Instant::now();
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let dir = root.join(".run/test-cluster");
        // Each node gets a fresh NVML stand-in (crates/nvml-standin) unless the test asks for
        // the simulated backend: two A100-80GB with MIG on, the driver's files under its root.
        let simulated = env.iter().any(|(k, v)| *k == "DYNMIG_BACKEND" && *v == "simulated");
        let nvml_dir = dir.join("nvml");
        install_standins(&nvml_dir, !simulated);
        let mut cmd = Command::new("bash");
        cmd.arg(root.join("slurm/local-dynmig.sh"))
            .arg("up")
            .env("DYNMIG_CLUSTER_DIR", &dir)
            .env("DYNMIG_BIN_DIR", bin_dir())
            .env("DYNMIG_MIN_LAYOUT_LIFETIME", "1s")
            .env("DYNMIG_NVML_DIR", &nvml_dir)
            .env("DYNMIG_NVML_INSTALLED", "1");
        if !with_controller {
            cmd.env("DYNMIG_NO_CONTROLLER", "1");
        }
        cmd.envs(env.iter().copied());
        let out = cmd.output().expect("run slurm/local-dynmig.sh");
        let c = Cluster {
            root,
            dir: dir.clone(),
            slurm_conf: dir.join("etc/slurm.conf").display().to_string(),
            expected_pending: Default::default(),
            started,
            _lock: lock,
            _machine_lock: machine_lock,
        };
        assert!(
            out.status.success(),
            "cluster did not come up: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
        c
    }

    pub fn cmd(&self, program: &str, args: &[&str]) -> Output {
        Command::new(program)
            .args(args)
            .env("SLURM_CONF", &self.slurm_conf)
            .env("DYNMIG_CONFIG", self.dir.join("dynmig.toml"))
            .output()
            .unwrap_or_else(|e| panic!("run {program}: {e}"))
    }

    /// Runs `program` as the user `uid` (and its primary group), from /tmp.
    pub fn as_user(&self, uid: u32, program: &str, args: &[&str]) -> Output {
        as_uid(uid, program, args)
            .env("SLURM_CONF", &self.slurm_conf)
            .output()
            .unwrap_or_else(|e| panic!("run {program} as uid {uid}: {e}"))
    }

    /// (major, minor) of the running release, from `slurmctld -V` ("slurm 22.05.8",
    /// "slurm-wlm 24.11.5").
    pub fn slurm_version(&self) -> (u32, u32) {
        let v = String::from_utf8_lossy(&self.cmd("slurmctld", &["-V"]).stdout).into_owned();
        let mut parts = v.split_whitespace().last().unwrap_or("").split('.');
        let mut next = || parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        (next(), next())
    }

    /// (major, minor, micro) of the running release.
    pub fn slurm_release(&self) -> (u32, u32, u32) {
        let v = String::from_utf8_lossy(&self.cmd("slurmctld", &["-V"]).stdout).into_owned();
        let mut parts = v.split_whitespace().last().unwrap_or("").split(['.', '-']);
        let mut next = || parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        (next(), next(), next())
    }

    /// Whether this release replaces a pending job's GRES on update (23.02.6 on; before, it
    /// merges and job_submit/dynmig refuses GPU updates: dynmig_core::modify).
    pub fn updates_replace_gres(&self) -> bool {
        self.slurm_release() >= (23, 2, 6)
    }

    /// The harness's invariant for a job a test submits: it ends in `want` (`COMPLETED`, or
    /// what the test expects) within `timeout`. A job still pending then fails the test with
    /// its Reason; one that ended otherwise fails it with its record.
    pub fn wait_ends(&self, id: u64, want: &str, timeout: Duration) {
        let start = Instant::now();
        loop {
            let job = self.job(id);
            let state = field(&job, "JobState");
            let active = [
                "PENDING",
                "RUNNING",
                "COMPLETING",
                "CONFIGURING",
                "REQUEUED",
                "SUSPENDED",
            ];
            if !active.contains(&state.as_str()) {
                assert_eq!(state, want, "job {id} ended {state}, not {want}: {job}");
                return;
            }
            if start.elapsed() > timeout {
                panic!(
                    "job {id} is still {state} after {timeout:?} (Reason={}): {job}\n{}",
                    field(&job, "Reason"),
                    self.logs()
                );
            }
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    /// An ordinary user made for the tests (`slurm/cluster.sh user`: on the host and in the
    /// release's chroot, and in the cluster's accounting); its uid.
    pub fn user(&self, name: &str) -> u32 {
        self.user_with_level(name, "None")
    }

    /// [`Cluster::user`] with an accounting AdminLevel (`Operator`, `Administrator`):
    /// returns once slurmctld knows the user with that level.
    pub fn user_with_level(&self, name: &str, level: &str) -> u32 {
        let out = Command::new("bash")
            .arg(self.root.join("slurm/cluster.sh"))
            .args(["user", name, level])
            .env("DYNMIG_CLUSTER_DIR", &self.dir)
            .output()
            .expect("run slurm/cluster.sh user");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().parse().expect("uid")
    }

    /// [`Cluster::ok`], asked again for up to 30 s while Slurm says it cannot answer yet: after
    /// a slurmctld restart a job update is refused with "the DB index is being set, try again
    /// in a bit" until slurmdbd has the job (seen on 22.05 in CI, 2026-11-28).
    pub fn ok_when_ready(&self, program: &str, args: &[&str]) -> String {
        let until = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let out = self.cmd(program, args);
            let err = String::from_utf8_lossy(&out.stderr).into_owned();
            if out.status.success() {
                return String::from_utf8_lossy(&out.stdout).into_owned();
            }
            let transient = err.contains("try again") || err.contains("Unable to contact slurm controller");
            assert!(
                transient && std::time::Instant::now() < until,
                "{program} {args:?} failed: {err}"
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    pub fn ok(&self, program: &str, args: &[&str]) -> String {
        let out = self.cmd(program, args);
        assert!(
            out.status.success(),
            "{program} {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub fn sbatch(&self, args: &[&str]) -> u64 {
        let mut a = vec!["--parsable", "--output=/dev/null"];
        a.extend_from_slice(args);
        self.ok("sbatch", &a).trim().parse().expect("job id")
    }

    pub fn job(&self, id: u64) -> String {
        self.ok("scontrol", &["show", "job", &id.to_string()])
    }

    pub fn job_state(&self, id: u64) -> String {
        field(&self.job(id), "JobState")
    }

    /// A node as Slurm's JSON shows it: `sinfo --json` on 22.05, `scontrol --json show
    /// nodes` from 23.02 (whose `sinfo --json` lists partition and state groups instead).
    pub fn node(&self, node: &str) -> Value {
        let mut out = self.cmd("sinfo", &["--json"]);
        let v = serde_json::from_slice::<Value>(&out.stdout).unwrap_or(Value::Null);
        if out.status.success() && v.get("sinfo").is_some() {
            out = self.cmd("scontrol", &["--json", "show", "nodes"]);
        }
        if !out.status.success() {
            return Value::Null;
        }
        let v: Value = serde_json::from_slice(&out.stdout).expect("json");
        v["nodes"]
            .as_array()
            .and_then(|a| a.iter().find(|n| n["name"] == node))
            .cloned()
            .unwrap_or(Value::Null)
    }

    /// Drains `node` for `target` as the controller does: the intent as the drain reason,
    /// then a wake-up to the node's agent at its `NodeAddr` on `[agent] wake_port` (the
    /// default; dynmig_host::wake), which otherwise would see the drain only at its 30 s look.
    pub fn drain_for(&self, node: &str, target: &str) {
        self.ok(
            "scontrol",
            &[
                "update",
                &format!("nodename={node}"),
                "state=drain",
                &format!("reason=dynmig/v1 repartition to={target}"),
            ],
        );
        // As the controller's, the wake-up is best effort: a test may have stopped the agent
        // (and runs `dynmig agent --once` itself).
        let address = self.node(node)["address"].as_str().unwrap_or_default().to_string();
        let _ = dynmig_host::wake::send(&address, dynmig_core::config::DEFAULT_WAKE_PORT);
    }

    pub fn wait_for(&self, what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
        let until = Instant::now() + timeout;
        while !f() {
            assert!(
                Instant::now() < until,
                "timed out after {timeout:?} waiting for {what}\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    pub fn logs(&self) -> String {
        // The queue and the nodes as Slurm sees them, for a job that waits too long.
        let queue = self.cmd("squeue", &["-a", "-o", "%i %T %r %b %Q %S"]);
        let nodes = self.cmd("sinfo", &["-N", "-o", "%N %t %G %E"]);
        let mut s = format!(
            "--- squeue\n{}--- sinfo\n{}",
            String::from_utf8_lossy(&queue.stdout),
            String::from_utf8_lossy(&nodes.stdout)
        );
        for f in [
            "log/controller.log",
            "log/agent-n1.log",
            "log/agent-n2.log",
            "dynmig/events.jsonl",
        ] {
            let text = std::fs::read_to_string(self.dir.join(f)).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(15).collect();
            s += &format!("--- {f}\n{}\n", tail.into_iter().rev().collect::<Vec<_>>().join("\n"));
        }
        s
    }

    pub fn gpu_layouts(&self, node: &str) -> Vec<String> {
        let out = Command::new(bin_dir().join("dynmig"))
            .args([
                "--config",
                &self.dir.join("dynmig.toml").display().to_string(),
                "gres-conf",
                "--node",
                node,
            ])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(str::to_string)
            .collect()
    }

    /// Runs `dynmig agent --node <node> --once` inside the node's network namespace with the
    /// node's host name, as slurm/local-dynmig.sh runs the agents (nsenter: `ip netns exec`
    /// remounts /sys, which breaks the slurmd the agent restarts).
    pub fn agent_once(&self, node: &str) -> Output {
        self.agent_once_env(node, &[])
    }

    pub fn kill_agent(&self, node: &str) {
        let pid_file = self.dir.join(format!("run/agent-{node}.pid"));
        if let Ok(pid) = std::fs::read_to_string(&pid_file) {
            let _ = Command::new("kill")
                .arg(pid.trim())
                .stderr(std::process::Stdio::null())
                .status();
        }
    }
}

impl Cluster {
    /// Marks a job the test means to leave pending (e.g. waiting on a node a fault left
    /// drained), so that the invariant at the end of the test does not count it.
    #[allow(dead_code)] // for a test that leaves a job pending on purpose
    pub fn expect_pending(&self, id: u64) {
        self.expected_pending.borrow_mut().push(id);
    }

    /// The harness's invariant, checked when every test's cluster goes down: no job is still
    /// pending, unheld, [`STUCK_AFTER`] after its submission, unless the test said so. Each
    /// such job as `job N pending for S s: Reason`. Held jobs (the test's own `--hold`), jobs
    /// waiting for a dependency or a begin time are the test's business.
    pub fn stuck_jobs(&self) -> Vec<String> {
        let out = self.cmd("squeue", &["-h", "-t", "PD", "-o", "%i|%r|%V"]);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        let mut stuck = Vec::new();
        for line in text.lines() {
            let mut parts = line.splitn(3, '|');
            let (Some(id), Some(reason), Some(submit)) = (parts.next(), parts.next(), parts.next()) else {
                continue;
            };
            let id_num: u64 = id.split(['_', '+']).next().unwrap_or("").parse().unwrap_or(0);
            if self.expected_pending.borrow().contains(&id_num)
                || ["JobHeld", "Dependency", "BeginTime"]
                    .iter()
                    .any(|r| reason.starts_with(r))
            {
                continue;
            }
            let submitted = Command::new("date")
                .args(["+%s", "-d", submit.trim()])
                .output()
                .ok()
                .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse::<i64>().ok())
                .unwrap_or(now);
            let age = now - submitted;
            if age > STUCK_AFTER.as_secs() as i64 {
                stuck.push(format!("job {id} pending for {age} s: {reason}"));
            }
        }
        stuck
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let stuck = if std::thread::panicking() {
            Vec::new()
        } else {
            self.stuck_jobs()
        };
        let _ = Command::new("bash")
            .arg(self.root.join("slurm/local-dynmig.sh"))
            .arg("down")
            .env("DYNMIG_CLUSTER_DIR", &self.dir)
            .status();
        // One line per test (libtest names the test's thread after the test): slurm/test.sh
        // prints the slowest of each release.
        let line = format!(
            "{}\t{:.0}\t{}\n",
            std::thread::current().name().unwrap_or("?"),
            self.started.elapsed().as_secs_f64(),
            if std::thread::panicking() || !stuck.is_empty() {
                "failed"
            } else {
                "ok"
            }
        );
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.root.join(".run/cluster-test-times.tsv"))
        {
            use std::io::Write;
            let _ = f.write_all(line.as_bytes());
        }
        assert!(
            stuck.is_empty(),
            "the harness's invariant: jobs left pending (not held) beyond {STUCK_AFTER:?}: {stuck:?}"
        );
    }
}

/// A command that runs `program` as `uid` with its primary group and no other, from /tmp.
/// With a release's Slurm in a chroot (`DYNMIG_SLURM_ROOT`, slurm/releases.sh) the switch
/// happens inside it, since only root may chroot: the Slurm commands there are the release's.
pub fn as_uid(uid: u32, program: &str, args: &[&str]) -> Command {
    let ids = [
        format!("--reuid={uid}"),
        format!("--regid={}", primary_gid(uid)),
        "--clear-groups".to_string(),
    ];
    let mut cmd = match std::env::var_os("DYNMIG_SLURM_ROOT").filter(|r| !r.is_empty()) {
        Some(root) => {
            let mut c = Command::new("chroot");
            c.arg(root).arg("setpriv").args(&ids);
            c.args(["sh", "-c", "cd /tmp && exec \"$@\"", "sh"]);
            c
        }
        None => {
            let mut c = Command::new("setpriv");
            c.args(&ids).current_dir("/tmp");
            c
        }
    };
    cmd.arg(program).args(args);
    cmd
}

/// The primary group of `uid` from /etc/passwd.
pub fn primary_gid(uid: u32) -> u32 {
    std::fs::read_to_string("/etc/passwd")
        .unwrap()
        .lines()
        .map(|l| l.split(':').collect::<Vec<_>>())
        .find(|f| f.len() > 3 && f[2] == uid.to_string())
        .and_then(|f| f[3].parse().ok())
        .unwrap_or_else(|| panic!("uid {uid} is not in /etc/passwd"))
}

/// Whether a node (of [`Cluster::node`]) has a state flag such as DRAIN: in `state_flags` on
/// 22.05, in the `state` list from 23.02.
pub fn has_flag(node: &Value, flag: &str) -> bool {
    ["state", "state_flags"]
        .iter()
        .filter_map(|k| node[*k].as_array())
        .flatten()
        .any(|f| f.as_str().is_some_and(|f| f.eq_ignore_ascii_case(flag)))
}

/// A job's TresPerNode out of `scontrol show job` text, in the 22.05 form: 23.11 and later
/// write `gres/gpu:...` where earlier releases wrote `gres:gpu:...`.
pub fn tres(job: &str) -> String {
    field(job, "TresPerNode").replace("gres/", "gres:")
}

/// A GRES list sorted, without socket annotations: "gpu:b:1(S:0),gpu:a:2" -> "gpu:a:2,gpu:b:1".
pub fn canon_gres(gres: &str) -> String {
    let mut items: Vec<String> = gres
        .trim()
        .split(',')
        .map(|g| g.split('(').next().unwrap_or("").to_string())
        .filter(|g| !g.is_empty())
        .collect();
    items.sort();
    items.join(",")
}

/// `Key=Value` out of `scontrol show` text.
pub fn field(text: &str, key: &str) -> String {
    text.split_whitespace()
        .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
        .unwrap_or("")
        .to_string()
}

/// A job submitted by [`Cluster::sbatch_out`]: its id and the output file it must write.
#[derive(Debug, Clone)]
pub struct TrackedJob {
    pub id: u64,
    pub out: PathBuf,
}

/// Fault injection (tests/cluster/faults.rs): restarting daemons as slurm/local-dynmig.sh and
/// slurm/cluster.sh do, the simulated backend's fault plan and pause file, and one checker of
/// what must hold after every fault.
impl Cluster {
    /// The simulated GPUs' state file of `node`.
    pub fn sim_state(&self, node: &str) -> PathBuf {
        self.dir.join(format!("dynmig/nodes/{node}/gpus.json"))
    }

    /// `node`'s state directory (journal, pid file, test points).
    pub fn node_state_dir(&self, node: &str) -> PathBuf {
        self.dir.join(format!("dynmig/nodes/{node}"))
    }

    /// Replaces `node`'s shared fault plans: the points of the agent's work in `"at"`
    /// (dynmig_node::testpoints, `test-points.json`), and the GPU faults, the rest
    /// (`gpus.json.faults.json`, dynmig_gpu::FaultPlan's JSON text form).
    pub fn set_faults(&self, node: &str, plan: &str) {
        let mut v: serde_json::Value = serde_json::from_str(plan).expect("a fault plan is JSON");
        let at = v.as_object_mut().and_then(|o| o.remove("at"));
        let points = serde_json::json!({ "at": at.unwrap_or_else(|| serde_json::json!([])) });
        std::fs::write(
            dynmig_node::testpoints::points_path(&self.node_state_dir(node)),
            points.to_string(),
        )
        .expect("write the points file");
        let standin = self.dir.join("nvml").join(node);
        if standin.exists() {
            // NVML: the stand-in kills the agent after its n-th changing NVML call.
            let s = nvml_standin::StandIn::open(&standin).expect("the node's stand-in");
            if let Some(n) = v.get("crash_after").and_then(Value::as_u64) {
                s.crash_after_mutations(n as u32).expect("plan the crash");
            }
            return;
        }
        let path = self.dir.join(format!("dynmig/nodes/{node}/gpus.json.faults.json"));
        std::fs::write(&path, v.to_string()).expect("write the faults file");
    }

    /// The pid in a pid file, if the file holds one.
    fn pid_in(&self, file: &str) -> Option<i32> {
        std::fs::read_to_string(self.dir.join(file)).ok()?.trim().parse().ok()
    }

    /// The running agent's pid, if it is alive: from the pid file the agent writes itself
    /// (`<state dir>/agent.pid`, "<pid> <start time>"; run/agent-NODE.pid of
    /// slurm/local-dynmig.sh may name the shell that started it).
    pub fn agent_pid(&self, node: &str) -> Option<i32> {
        std::fs::read_to_string(self.dir.join(format!("dynmig/nodes/{node}/agent.pid")))
            .ok()?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
            .filter(|p| alive(*p))
    }

    /// slurmd's pid of `node` (slurm/cluster.sh's pid file), if it is alive.
    pub fn slurmd_pid(&self, node: &str) -> Option<i32> {
        self.pid_in(&format!("nodes/{node}/slurmd.pid")).filter(|p| alive(*p))
    }

    /// Starts `node`'s agent daemon as slurm/local-dynmig.sh does (in the node's namespace,
    /// log appended to log/agent-NODE.log, pid in run/agent-NODE.pid); returns the pid of
    /// the agent that runs then (an agent still alive keeps its lock, and the new one exits).
    pub fn start_agent(&self, node: &str) -> i32 {
        let script = format!(
            "nsenter --net=/run/netns/dynmig-{node} unshare --uts sh -c 'hostname \"$0\" && exec \"$@\"' {node} \
             {dynmig} --config {conf} agent --node {node} >>{dir}/log/agent-{node}.log 2>&1 & echo $! >{dir}/run/agent-{node}.pid",
            dynmig = bin_dir().join("dynmig").display(),
            conf = self.dir.join("dynmig.toml").display(),
            dir = self.dir.display(),
        );
        let st = Command::new("bash")
            .args(["-c", &script])
            .env("SLURM_CONF", &self.slurm_conf)
            .status()
            .expect("start the agent");
        assert!(st.success());
        // Up once the agent has written its own pid file (after taking the instance lock).
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(pid) = self.agent_pid(node) {
                return pid;
            }
            assert!(
                Instant::now() < until,
                "the agent of {node} did not start\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// [`Cluster::agent_once`] with more environment (e.g. `DYNMIG_TEST_POINTS`, a plan
    /// of that process only).
    pub fn agent_once_env(&self, node: &str, env: &[(&str, &str)]) -> Output {
        Command::new("nsenter")
            .arg(format!("--net=/run/netns/dynmig-{node}"))
            .args(["unshare", "--uts", "sh", "-c", "hostname \"$0\" && exec \"$@\"", node])
            .arg(bin_dir().join("dynmig"))
            .args([
                "--config",
                &self.dir.join("dynmig.toml").display().to_string(),
                "agent",
                "--node",
                node,
                "--once",
            ])
            .env("SLURM_CONF", &self.slurm_conf)
            .envs(env.iter().copied())
            .output()
            .unwrap()
    }

    /// Stops `node`'s agent (SIGTERM to the pid it wrote itself, and to the one
    /// slurm/local-dynmig.sh recorded, in case the agent has not written its own pid file yet)
    /// and waits until it is gone.
    pub fn stop_agent(&self, node: &str) {
        let started = self.pid_in(&format!("run/agent-{node}.pid")).filter(|p| alive(*p));
        for pid in [self.agent_pid(node), started].into_iter().flatten() {
            self.signal(pid, "-TERM");
            assert!(
                self.wait_gone(pid, Duration::from_secs(30)),
                "the agent of {node} did not stop"
            );
        }
    }

    /// Sends `sig` (`-9`, `-USR1`, ...) to `pid`.
    pub fn signal(&self, pid: i32, sig: &str) {
        let _ = Command::new("kill")
            .args([sig, &pid.to_string()])
            .stderr(std::process::Stdio::null())
            .status();
    }

    /// Waits (up to `timeout`) until `pid` is gone; false if it is still there.
    pub fn wait_gone(&self, pid: i32, timeout: Duration) -> bool {
        let until = Instant::now() + timeout;
        while alive(pid) {
            if Instant::now() > until {
                return false;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        true
    }

    /// Waits (up to `timeout`) for the simulated backend of `node` to pause at a point
    /// fault; returns the point's name.
    pub fn wait_paused(&self, node: &str, timeout: Duration) -> String {
        let path = dynmig_node::testpoints::pause_path(&self.node_state_dir(node));
        let mut point = String::new();
        self.wait_for("the agent to pause at its point fault", timeout, || {
            point = std::fs::read_to_string(&path).unwrap_or_default().trim().to_string();
            !point.is_empty()
        });
        point
    }

    /// Lets a paused agent go on.
    pub fn release_pause(&self, node: &str) {
        let _ = std::fs::remove_file(dynmig_node::testpoints::pause_path(&self.node_state_dir(node)));
    }

    /// Restarts slurmctld on its saved state (slurm/cluster.sh restart-ctld).
    pub fn restart_ctld(&self) {
        let out = Command::new("bash")
            .arg(self.root.join("slurm/cluster.sh"))
            .arg("restart-ctld")
            .env("DYNMIG_CLUSTER_DIR", &self.dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }

    /// Starts the history server as slurm/local-dynmig.sh does (pid in run/history.pid).
    pub fn start_history(&self) {
        let script = format!(
            "{dynmig} --config {conf} history serve >>{dir}/log/history.log 2>&1 & echo $! >{dir}/run/history.pid",
            dynmig = bin_dir().join("dynmig").display(),
            conf = self.dir.join("dynmig.toml").display(),
            dir = self.dir.display(),
        );
        assert!(Command::new("bash")
            .args(["-c", &script])
            .env("SLURM_CONF", &self.slurm_conf)
            .status()
            .unwrap()
            .success());
    }

    /// Submits a job whose script writes `done-<job id>` into `<dir>/job-<id>.out`.
    pub fn sbatch_out(&self, dir: &Path, args: &[&str]) -> Result<TrackedJob, String> {
        let pattern = dir.join("job-%j.out").display().to_string();
        let output = format!("--output={pattern}");
        let mut a = vec!["--parsable", &output];
        a.extend_from_slice(args);
        a.push("--wrap=echo done-$SLURM_JOB_ID");
        let out = self.cmd("sbatch", &a);
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
        }
        let id: u64 = String::from_utf8_lossy(&out.stdout)
            .trim()
            .split(';')
            .next()
            .unwrap_or("")
            .parse()
            .map_err(|e| format!("job id: {e}"))?;
        Ok(TrackedJob {
            id,
            out: dir.join(format!("job-{id}.out")),
        })
    }

    /// Waits until every job has ended (up to `timeout`) and returns those that did not end
    /// COMPLETED with their output written, each with what went wrong.
    pub fn lost_jobs(&self, jobs: &[TrackedJob], timeout: Duration) -> Vec<String> {
        let until = Instant::now() + timeout;
        let done = |j: &TrackedJob| {
            std::fs::read_to_string(&j.out).is_ok_and(|t| t.contains(&format!("done-{}", j.id)))
                && self.job_state(j.id) == "COMPLETED"
        };
        let mut left: Vec<&TrackedJob> = jobs.iter().collect();
        while !left.is_empty() && Instant::now() < until {
            left.retain(|j| !done(j));
            if !left.is_empty() {
                std::thread::sleep(Duration::from_millis(300));
            }
        }
        left.iter()
            .map(|j| {
                let job = self.cmd("scontrol", &["show", "job", &j.id.to_string()]);
                let text = String::from_utf8_lossy(&job.stdout);
                format!(
                    "job {}: {} ({}), output {}",
                    j.id,
                    field(&text, "JobState"),
                    field(&text, "Reason"),
                    if j.out.exists() { "written" } else { "missing" }
                )
            })
            .collect()
    }

    /// `node`'s GPU count and instances `(GPU, profile, device files)`, through the backend
    /// the cluster runs: NVML on the node's stand-in (`nvml/<node>`), else the simulated
    /// backend's state file.
    pub fn node_instances(&self, node: &str) -> Result<(usize, Vec<NodeInstance>), String> {
        let standin = self.dir.join("nvml").join(node);
        if standin.exists() {
            use dynmig_gpu::GpuBackend;
            let access = dynmig_core::config::NvmlAccess {
                library: Some(standin.join("libnvidia-ml.so.1")),
                device_root: standin.join("root"),
                timeout: Duration::from_secs(20),
            };
            let b = dynmig_gpu::NvmlBackend::open_with(&access, false).map_err(|e| e.to_string())?;
            let gpus = b.gpus().map_err(|e| e.to_string())?;
            let mut out = Vec::new();
            for g in &gpus {
                for i in &g.instances {
                    out.push((
                        g.index as usize,
                        i.placed.profile.name.to_string(),
                        i.device_files.clone(),
                    ));
                }
            }
            return Ok((gpus.len(), out));
        }
        let state: Value =
            serde_json::from_str(&std::fs::read_to_string(self.sim_state(node)).map_err(|e| e.to_string())?)
                .map_err(|e| e.to_string())?;
        let gpus = state["gpus"].as_array().cloned().unwrap_or_default();
        let mut out = Vec::new();
        for (g, gpu) in gpus.iter().enumerate() {
            for i in gpu["instances"].as_array().cloned().unwrap_or_default() {
                let file = self.dir.join(format!("dynmig/devices/{node}/gpu{g}/gi{}", i["gi_id"]));
                out.push((g, i["profile"].as_str().unwrap_or("?").to_string(), vec![file]));
            }
        }
        Ok((gpus.len(), out))
    }

    /// What must hold on `node` after any fault, or what does not:
    /// - the simulated GPUs, gres.conf and Slurm agree: the same instances (gres.conf's
    ///   files are exactly the instances' device files, which exist), the same type counts in
    ///   Slurm's GRES of the node (Slurm knows the node);
    /// - no orphan instance: the node holds one of `layouts` (its layout before and after a
    ///   repartition), GPU by GPU;
    /// - the node is in service (not drained or down, no reason, no journal), or drained
    ///   with a reason holding every text of `drain_says` (`None`: it must be in service).
    ///
    /// Returns the node's layout and state in words.
    pub fn check_node(&self, node: &str, layouts: &[&str], drain_says: Option<&[&str]>) -> Result<String, String> {
        use dynmig_core::geometry::{NodeLayout, A100_80GB};
        use std::collections::BTreeMap;
        let (gpu_count, instances) = self.node_instances(node)?;
        let mut per_gpu: Vec<BTreeMap<String, u32>> = vec![BTreeMap::new(); gpu_count];
        let mut files: Vec<String> = Vec::new();
        for (g, profile, f) in &instances {
            *per_gpu[*g].entry(profile.clone()).or_insert(0) += 1;
            files.push(f.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(","));
        }
        let words: Vec<String> = per_gpu
            .iter()
            .map(|c| {
                if c.is_empty() {
                    "empty".to_string()
                } else {
                    c.iter().map(|(p, n)| format!("{n}x{p}")).collect::<Vec<_>>().join("+")
                }
            })
            .collect();
        let layout = words.join(",");
        // No orphan: GPU by GPU, one of the layouts.
        for (g, have) in per_gpu.iter().enumerate() {
            let known = layouts.iter().any(|l| {
                NodeLayout::parse(&A100_80GB, gpu_count, l).is_ok_and(|nl| {
                    let want: BTreeMap<String, u32> = nl.gpus[g].iter().map(|(p, n)| (p.to_string(), n)).collect();
                    &want == have
                })
            });
            if !known {
                return Err(format!(
                    "GPU {g} of {node} holds {}: in none of {layouts:?} (orphan instances)",
                    words[g]
                ));
            }
        }
        // Device files of the instances (and, simulated, no other: the NVML driver's
        // capability files stay after a destroy, as on a real node).
        for f in instances.iter().flat_map(|(_, _, f)| f) {
            if !f.exists() {
                return Err(format!("{}: device file of an instance missing", f.display()));
            }
        }
        let simulated = !self.dir.join("nvml").join(node).exists();
        for g in (0..gpu_count).filter(|_| simulated) {
            let dir = self.dir.join(format!("dynmig/devices/{node}/gpu{g}"));
            for e in std::fs::read_dir(&dir)
                .map(|d| d.flatten().collect::<Vec<_>>())
                .unwrap_or_default()
            {
                if !files.contains(&e.path().display().to_string()) {
                    return Err(format!("{}: a device file of no instance", e.path().display()));
                }
            }
        }
        // gres.conf names exactly the instances' files.
        let conf =
            std::fs::read_to_string(self.dir.join(format!("nodes/{node}/etc/gres.conf"))).map_err(|e| e.to_string())?;
        let mut conf_counts: BTreeMap<String, u32> = BTreeMap::new();
        let mut conf_files: Vec<String> = Vec::new();
        for l in conf.lines().filter(|l| !l.trim().is_empty() && !l.starts_with('#')) {
            let get = |k: &str| {
                l.split_whitespace()
                    .find_map(|kv| kv.strip_prefix(k))
                    .unwrap_or("")
                    .to_string()
            };
            *conf_counts.entry(get("Type=")).or_insert(0) += 1;
            let one = get("File=");
            conf_files.push(if one.is_empty() { get("MultipleFiles=") } else { one });
        }
        let (mut a, mut b) = (files.clone(), conf_files.clone());
        a.sort();
        b.sort();
        if a != b {
            return Err(format!(
                "gres.conf of {node} names {b:?}, the GPUs hold {a:?} (GPUs {layout})"
            ));
        }
        // Slurm's GRES of the node.
        let n = self.node(node);
        if n.is_null() {
            return Err(format!("Slurm does not know node {node} (GPUs {layout})"));
        }
        let mut slurm_counts: BTreeMap<String, u32> = BTreeMap::new();
        for item in canon_gres(n["gres"].as_str().unwrap_or(""))
            .split(',')
            .filter(|s| !s.is_empty())
        {
            let parts: Vec<&str> = item.split(':').collect();
            if let [_, t, c] = parts.as_slice() {
                *slurm_counts.entry(t.to_string()).or_insert(0) += c.parse::<u32>().unwrap_or(0);
            }
        }
        slurm_counts.retain(|_, c| *c > 0);
        if slurm_counts != conf_counts {
            return Err(format!(
                "Slurm shows {node} with {slurm_counts:?}, gres.conf and the GPUs hold {conf_counts:?}"
            ));
        }
        let reason = n["reason"].as_str().unwrap_or("").to_string();
        let drained = has_flag(&n, "DRAIN");
        let down = has_flag(&n, "DOWN") || has_flag(&n, "NOT_RESPONDING");
        let journal = self.dir.join(format!("dynmig/nodes/{node}/agent-journal.json"));
        match drain_says {
            None => {
                if drained || down || !reason.is_empty() {
                    return Err(format!("{node} is not in service: {n}"));
                }
                if journal.exists() {
                    return Err(format!("{node} is in service but its journal is still there"));
                }
                Ok(format!("in service with {layout}"))
            }
            Some(says) => {
                if !drained {
                    return Err(format!("{node} is not drained (expected a reason with {says:?}): {n}"));
                }
                if let Some(s) = says.iter().find(|s| !reason.contains(**s)) {
                    return Err(format!("{node}'s drain reason does not say '{s}': {reason}"));
                }
                Ok(format!("drained with {layout}: {reason}"))
            }
        }
    }

    /// `node` in service with exactly `layout`'s GRES (and no reason).
    pub fn serves(&self, node: &str, layout: &str) -> bool {
        use dynmig_core::geometry::{NodeLayout, A100_80GB};
        let Ok(want) = NodeLayout::parse(&A100_80GB, 2, layout) else {
            return false;
        };
        let n = self.node(node);
        if n.is_null() || has_flag(&n, "DRAIN") || !n["reason"].as_str().unwrap_or("").is_empty() {
            return false;
        }
        let mut want: Vec<String> = want.totals().iter().map(|(p, c)| format!("gpu:{p}:{c}")).collect();
        want.sort();
        canon_gres(n["gres"].as_str().unwrap_or("")) == want.join(",")
    }
}

/// Whether a process `pid` exists and is not a zombie.
pub fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit(')')
            .next()
            .is_some_and(|rest| !rest.trim_start().starts_with('Z'))
    })
}
