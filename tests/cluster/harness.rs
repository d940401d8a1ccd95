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
    _lock: std::sync::MutexGuard<'static, ()>,
    _machine_lock: std::fs::File,
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
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let dir = root.join(".run/test-cluster");
        let mut cmd = Command::new("bash");
        cmd.arg(root.join("slurm/local-dynmig.sh"))
            .arg("up")
            .env("DYNMIG_CLUSTER_DIR", &dir)
            .env("DYNMIG_BIN_DIR", bin_dir())
            .env("DYNMIG_MIN_LAYOUT_LIFETIME", "1s");
        if !with_controller {
            cmd.env("DYNMIG_NO_CONTROLLER", "1");
        }
        cmd.envs(env.iter().copied());
        let out = cmd.output().expect("run slurm/local-dynmig.sh");
        let c = Cluster {
            root,
            dir: dir.clone(),
            slurm_conf: dir.join("etc/slurm.conf").display().to_string(),
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
        let mut s = String::new();
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
        let v: Value = serde_json::from_str(
            &std::fs::read_to_string(self.dir.join(format!("dynmig/nodes/{node}/gpus.json"))).expect("state file"),
        )
        .expect("state json");
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
        assert!(out.status.success());
        let _ = v;
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
            .output()
            .unwrap()
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

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(self.root.join("slurm/local-dynmig.sh"))
            .arg("down")
            .env("DYNMIG_CLUSTER_DIR", &self.dir)
            .status();
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
