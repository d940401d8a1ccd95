//! Root-side attacks (issue 14, item 5): an ordinary test user tries the known attacks on the
//! code that runs as root on a node (the Prolog and Epilog slurmd runs, the restart helper the
//! Epilog starts, the agent's pid file) with real jobs on the local cluster:
//!
//! - injected fields: a job name and comment holding newlines, control characters, `"}` JSON
//!   breakers, `key=value` pairs of `scontrol show job`, `$(...)`, a decision record and a
//!   history record; a stderr path holding `ExitCode=97:0 StdErr=<root file>`; hostile
//!   `--mig-*` hint values;
//! - the job's stderr swapped for a link to a root-owned file, for a FIFO, a folder of its path
//!   swapped for a link to a root-owned folder, stderr on /dev/zero;
//! - stale pid files of the agent naming a root process (the user cannot write them: tried too);
//! - huge outputs: 200 MB on stdout and 50 MB on stderr without a newline.
//!
//! After them: every root-owned file watched (a canary, slurm.conf, dynmig.toml, gres.conf) has
//! its content and modification time, the root process the pid files named is alive, both
//! nodes are in service, every Epilog ended within [`EPILOG_BOUND`], and each job's outcome is
//! the one expected. The test prints one line per attack (`attack: ... -> ...`), the table of
//! docs/results/attacks-2026-11-26.md.

use crate::harness::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// Longest a job may stay COMPLETING (its Epilog running) after it was first seen ended.
const EPILOG_BOUND: Duration = Duration::from_secs(20);

/// The folder of the attacks: readable by everyone (the jobs' paths are in it), with a
/// root-owned folder (`root/`, 0755, its files 0644) and the attacker's own (`user/`).
const ATTACK_DIR: &str = "/tmp/dynmig-attacks";

/// What a root-owned canary holds: the out-of-memory message, so that a root-side read of it
/// through a link would show as an out-of-memory restart.
const CANARY_TEXT: &str = "root canary: torch.OutOfMemoryError: CUDA out of memory\n";

/// A user's own Slurm client (the host's libslurm): submits a held batch job whose
/// `admin_comment` is its first argument (none when empty), which sbatch has no option for.
const ADMIN_COMMENT_CLIENT: &str = r##"/* A user's own client: submits a held batch job with an admin_comment through libslurm. */
#include <slurm/slurm.h>
#include <stdio.h>
#include <unistd.h>

int main(int argc, char **argv) {
    job_desc_msg_t d;
    submit_response_msg_t *resp = NULL;
    char *env[] = {"PATH=/bin:/usr/bin", NULL};
    if (argc < 2)
        return 2;
    slurm_init(NULL);
    slurm_init_job_desc_msg(&d);
    d.name = "admin-comment-forger";
    if (argv[1][0])
        d.admin_comment = argv[1];
    d.script = "#!/bin/sh\ntrue\n";
    d.user_id = getuid();
    d.group_id = getgid();
    d.work_dir = "/tmp";
    d.std_out = "/dev/null";
    d.environment = env;
    d.env_size = 1;
    d.tres_per_node = "gres:gpu:1";
    d.priority = 0;
    if (slurm_submit_batch_job(&d, &resp) != 0) {
        fprintf(stderr, "refused: %s\n", slurm_strerror(slurm_get_errno()));
        return 1;
    }
    printf("%u\n", resp->job_id);
    return 0;
}
"##;

/// A root-owned file's content and modification time.
#[derive(Debug, PartialEq, Eq)]
struct Seen {
    bytes: Vec<u8>,
    mtime: (i64, i64),
    mode: u32,
    uid: u32,
}

fn seen(p: &Path) -> Seen {
    let m = std::fs::metadata(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    Seen {
        bytes: std::fs::read(p).unwrap(),
        mtime: (m.mtime(), m.mtime_nsec()),
        mode: m.mode(),
        uid: m.uid(),
    }
}

impl Cluster {
    /// Every job as `squeue --json --states=all` shows it (22.05 ignores `--jobs` with
    /// `--json`, so no filter is given).
    fn jobs_json(&self) -> Vec<Value> {
        let out = self.cmd("squeue", &["--json", "--states=all"]);
        match serde_json::from_slice::<Value>(&out.stdout) {
            Ok(v) => v["jobs"].as_array().cloned().unwrap_or_default(),
            Err(e) => {
                // The byte the error points at (line and column are 1-based).
                let line_start: usize = out
                    .stdout
                    .split(|b| *b == b'\n')
                    .take(e.line().saturating_sub(1))
                    .map(|l| l.len() + 1)
                    .sum();
                let at = (line_start + e.column().saturating_sub(1)).min(out.stdout.len());
                panic!(
                    "squeue --json ({} bytes, exit {:?}) is not JSON: {e}\n{}",
                    out.stdout.len(),
                    out.status.code(),
                    String::from_utf8_lossy(&out.stdout[at.saturating_sub(300)..(at + 300).min(out.stdout.len())])
                        .escape_debug()
                )
            }
        }
    }

    /// `dynmig history show --json` of the test cluster.
    fn history_records(&self) -> Vec<Value> {
        let out = self.cmd(
            bin_dir().join("dynmig").to_str().unwrap(),
            &["history", "show", "--json", "--limit", "10000"],
        );
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "dynmig history show --json: {e}: {}",
                String::from_utf8_lossy(&out.stderr)
            )
        })
    }
}

/// A job's states in squeue's JSON: a string on 22.05 ("COMPLETING" while its Epilog runs), a
/// list from 23.02 (["FAILED", "COMPLETING"]).
fn states(job: &Value) -> Vec<String> {
    match &job["job_state"] {
        Value::String(s) => vec![s.to_uppercase()],
        Value::Array(a) => a.iter().filter_map(Value::as_str).map(str::to_uppercase).collect(),
        _ => Vec::new(),
    }
}

fn ended(job: &Value) -> bool {
    let s = states(job);
    !s.is_empty()
        && !s
            .iter()
            .any(|s| matches!(s.as_str(), "PENDING" | "RUNNING" | "CONFIGURING"))
}

fn completing(job: &Value) -> bool {
    states(job).iter().any(|s| s == "COMPLETING")
}

/// The exit status of a job in squeue's JSON (a number on 22.05, `return_code` from 23.02).
fn exit_status(job: &Value) -> i64 {
    match &job["exit_code"] {
        Value::Object(o) => o.get("return_code").and_then(Value::as_i64).unwrap_or(-1),
        v => v.as_i64().unwrap_or(-1),
    }
}

fn text(v: &Value) -> String {
    v.as_str().unwrap_or("").to_string()
}

/// Runs a shell script as the attacker.
fn user_sh(c: &Cluster, uid: u32, script: &str) -> Output {
    c.as_user(uid, "sh", &["-c", script])
}

/// Submits as the attacker; the job id, or the refusal's stderr.
fn user_sbatch(c: &Cluster, uid: u32, args: &[&str]) -> Result<u64, String> {
    let mut a = vec!["--parsable", "--time=5"];
    a.extend_from_slice(args);
    let out = c.as_user(uid, "sbatch", &a);
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout)
            .trim()
            .split(';')
            .next()
            .unwrap()
            .parse()
            .expect("job id"))
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// The start time of process `pid` (field 22 of /proc/<pid>/stat).
fn start_time(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    after.split_whitespace().nth(19).unwrap().parse().unwrap()
}

fn alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    unsafe { libc::kill(pid as i32, 0) == 0 }
}

/// Waits until each job has ended and its Epilog is done (not COMPLETING, and with
/// `needs_record` its history record is in). Returns each job's last JSON and how long it
/// stayed completing after it was first seen ended.
fn wait_done(c: &Cluster, jobs: &[u64], needs_record: bool, timeout: Duration) -> BTreeMap<u64, (Value, Duration)> {
    let until = Instant::now() + timeout;
    let mut first_end: BTreeMap<u64, Instant> = BTreeMap::new();
    let mut done: BTreeMap<u64, (Value, Duration)> = BTreeMap::new();
    while done.len() < jobs.len() {
        assert!(
            Instant::now() < until,
            "jobs {:?} not done after {timeout:?}; done: {:?}\n{}",
            jobs,
            done.keys().collect::<Vec<_>>(),
            c.logs()
        );
        let all = c.jobs_json();
        let records = if needs_record { c.history_records() } else { Vec::new() };
        for &id in jobs {
            if done.contains_key(&id) {
                continue;
            }
            let Some(j) = all.iter().find(|j| j["job_id"] == id) else {
                continue;
            };
            if !ended(j) {
                continue;
            }
            let t0 = *first_end.entry(id).or_insert_with(Instant::now);
            let has_record = !needs_record || records.iter().any(|r| r["job_id"] == id);
            if !completing(j) && has_record {
                let node = text(&j["nodes"]);
                let from_log = epilog_time(c, &node, id).unwrap_or_default();
                done.insert(id, (j.clone(), t0.elapsed().max(from_log)));
            }
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    done
}

/// Seconds of the day of a slurmd log line's `[2026-11-26T05:24:20.527]` stamp.
fn log_stamp(line: &str) -> Option<f64> {
    let t = line.strip_prefix('[')?.split(']').next()?.split('T').nth(1)?;
    let mut f = t.split(':');
    let (h, m, s): (f64, f64, f64) = (
        f.next()?.parse().ok()?,
        f.next()?.parse().ok()?,
        f.next()?.parse().ok()?,
    );
    Some(h * 3600.0 + m * 60.0 + s)
}

/// How long slurmd's epilog of job `id` ran on `node`, from its log (debug level): from
/// "Running spank/epilog for jobid [N]" (the SPANK epilog, then the Epilog script) to
/// "completed epilog for jobid N" (22.05; "... for JobId=N SLUID=..." on 26.05). `None` when
/// the log does not say (another release's wording).
fn epilog_time(c: &Cluster, node: &str, id: u64) -> Option<Duration> {
    let log = std::fs::read_to_string(c.dir.join(format!("log/slurmd-{node}.log"))).ok()?;
    // `needle` followed by no further digit (job 1 is not job 12).
    let names = |l: &str, needle: &str| {
        l.match_indices(needle)
            .any(|(i, _)| !l[i + needle.len()..].starts_with(|ch: char| ch.is_ascii_digit()))
    };
    let start = log
        .lines()
        .find(|l| names(l, &format!("spank/epilog for jobid [{id}]")))
        .and_then(log_stamp)?;
    let end = log
        .lines()
        .find(|l| {
            names(l, &format!("completed epilog for jobid {id}"))
                || names(l, &format!("completed epilog for JobId={id}"))
        })
        .and_then(log_stamp)?;
    (end >= start).then(|| Duration::from_secs_f64(end - start))
}

/// Whether a node is in service: not drained, draining, down or failed.
fn in_service(c: &Cluster, node: &str) -> Result<(), String> {
    let n = c.node(node);
    let bad = ["DRAIN", "DRAINED", "DRAINING", "DOWN", "FAIL", "NOT_RESPONDING"];
    let state = n["state"].clone();
    let base_down = state
        .as_str()
        .is_some_and(|s| bad.iter().any(|b| s.eq_ignore_ascii_case(b)));
    if n.is_null() || base_down || bad.iter().any(|b| has_flag(&n, b)) {
        return Err(format!(
            "{node}: state {state} flags {} reason '{}'",
            n["state_flags"],
            text(&n["reason"])
        ));
    }
    Ok(())
}

fn record_of(records: &[Value], id: u64) -> Vec<Value> {
    records.iter().filter(|r| r["job_id"] == id).cloned().collect()
}

/// The detail of the `oom_restart` event of job `id`, if the Epilog logged one.
fn restart_event(c: &Cluster, id: u64) -> Option<String> {
    let events = std::fs::read_to_string(c.dir.join("dynmig/events.jsonl")).unwrap_or_default();
    events
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|e| e["kind"] == "oom_restart" && e["job"] == id)
        .map(|e| text(&e["detail"]))
}

/// The last `n` bytes of a file, as text.
fn tail_of(p: &Path, n: u64) -> String {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut f) = std::fs::File::open(p) else {
        return String::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = f.seek(SeekFrom::Start(len.saturating_sub(n)));
    let mut b = Vec::new();
    let _ = f.take(n).read_to_end(&mut b);
    String::from_utf8_lossy(&b).into_owned()
}

fn line(what: &str, outcome: &str) {
    println!("attack: {what} -> {outcome}");
}

#[test]
#[ignore = "needs root, Slurm and the built plugins (slurm/test.sh)"]
fn a_test_users_attacks_change_no_root_file_signal_no_foreign_process_and_keep_the_nodes_in_service() {
    let c = Cluster::up(false);
    let dynmig = bin_dir().join("dynmig");
    // The Epilogs send their records to the history server: it must be listening before the
    // first job ends (a record it misses waits in the spool for the next Epilog's flush).
    c.wait_for("the history server to listen", Duration::from_secs(30), || {
        std::fs::read_to_string(c.dir.join("log/history.log")).is_ok_and(|l| l.contains("listening on"))
    });
    let uid = c.user("dynmig-attacker");
    let gid = primary_gid(uid);

    // The attack folder: root/ is root's (0755, files 0644), user/ the attacker's.
    let base = PathBuf::from(ATTACK_DIR);
    let _ = std::fs::remove_dir_all(&base);
    let rootdir = base.join("root");
    let u = base.join("user");
    std::fs::create_dir_all(&rootdir).unwrap();
    std::fs::create_dir_all(&u).unwrap();
    for d in [&base, &rootdir] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::os::unix::fs::chown(&u, Some(uid), Some(gid)).unwrap();
    std::fs::set_permissions(&u, std::fs::Permissions::from_mode(0o755)).unwrap();
    let canary = rootdir.join("canary");
    let root_err = rootdir.join("err");
    for f in [&canary, &root_err] {
        std::fs::write(f, CANARY_TEXT).unwrap();
        std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let pwned = base.join("pwned");
    let n1_state = c.dir.join("dynmig/nodes/n1");
    let n2_state = c.dir.join("dynmig/nodes/n2");
    let watched: Vec<PathBuf> = vec![
        canary.clone(),
        root_err.clone(),
        c.dir.join("etc/slurm.conf"),
        c.dir.join("dynmig.toml"),
        c.dir.join("nodes/n1/etc/gres.conf"),
        c.dir.join("nodes/n2/etc/gres.conf"),
    ];
    let before: Vec<Seen> = watched.iter().map(|p| seen(p)).collect();
    // A root process the stale pid files will name: SIGUSR1 would end it.
    let mut foreign = Command::new("sleep").arg("600").spawn().expect("start sleep");
    let foreign_pid = foreign.id();
    let u_s = u.display().to_string();
    let root_s = rootdir.display().to_string();
    let canary_s = canary.display().to_string();

    // --- 1. The attacker writes where root-side code reads: every try refused. -------------
    let plant = [
        n1_state.join("agent.pid"),
        n1_state.join("agent.waiting"),
        n1_state.join("peaks/999999.json"),
        n1_state.join("energy.json"),
        n1_state.join("gpus.json"),
        c.dir.join("dynmig/spool/999999-0-n1.json"),
        c.dir.join("dynmig/events.jsonl"),
        c.dir.join("nodes/n1/slurmd.pid"),
        c.dir.join("run/agent-n1.pid"),
    ];
    for p in &plant {
        let existed = p.exists();
        let out = user_sh(
            &c,
            uid,
            &format!(
                "mkdir -p '{}' 2>/dev/null; echo 1 >> '{}'",
                p.parent().unwrap().display(),
                p.display()
            ),
        );
        assert!(!out.status.success(), "the attacker wrote {}", p.display());
        if !existed {
            assert!(!p.exists(), "the attacker created {}", p.display());
        }
    }
    line(
        "plant agent.pid, agent.waiting, a peak file, the energy ledger, GPU state, a spool record, events, slurmd.pid as the user",
        &format!("{} of {} refused (permission denied)", plant.len(), plant.len()),
    );

    // --- 2. Hostile --mig-* hints: refused at submit, nothing recorded. ---------------------
    let long = "9".repeat(10_000);
    let hints = [
        "--mig-mem=9G profile=1g.10gb source=history".to_string(),
        "--mig-mem=9G\nsource=model".to_string(),
        "--mig-mem=9G\"}{\"v\":1".to_string(),
        "--mig-mem=$(touch /tmp/dynmig-attacks/pwned)".to_string(),
        "--mig-profile=7g.80gb count=9 mem=1".to_string(),
        "--mig-profile=7g.80gb;id".to_string(),
        format!("--mig-mem={long}G"),
    ];
    for h in &hints {
        let r = user_sbatch(&c, uid, &["--gres=gpu:1", "-o", "/dev/null", h, "--wrap=true"]);
        let err = r.expect_err(&format!("hint {h:?} was accepted"));
        line(
            &format!("hint {:?}", dynmig_clip(h)),
            &format!("sbatch refused ({} bytes of message)", err.len()),
        );
    }

    // An AdminComment set at submit through libslurm by the user: a forged decision record.
    // Host release only (the client is built against the host's libslurm).
    if std::env::var_os("DYNMIG_SLURM_ROOT").is_none_or(|r| r.is_empty()) {
        let src = rootdir.join("submit_admin_comment.c");
        let exe = rootdir.join("submit_admin_comment");
        std::fs::write(&src, ADMIN_COMMENT_CLIENT).unwrap();
        let built = Command::new("cc")
            .arg("-o")
            .arg(&exe)
            .arg(&src)
            .arg("-lslurm")
            .output()
            .is_ok_and(|o| o.status.success());
        if built {
            // The control: the same client without an AdminComment is accepted.
            let out = c.as_user(uid, exe.to_str().unwrap(), &[""]);
            assert!(
                out.status.success(),
                "the client without an AdminComment was refused: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let _ = c.cmd("scancel", &[String::from_utf8_lossy(&out.stdout).trim()]);
            let forged = "dynmig/v1 profile=1g.10gb count=1 mem=1 source=mig-mem";
            let out = c.as_user(uid, exe.to_str().unwrap(), &[forged]);
            let said = String::from_utf8_lossy(&out.stderr).trim().to_string();
            let outcome = if out.status.success() {
                let id: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
                let j = c.jobs_json().into_iter().find(|j| j["job_id"] == id).unwrap();
                let admin = text(&j["admin_comment"]);
                let _ = c.cmd("scancel", &[&id.to_string()]);
                assert_ne!(admin, forged, "the user's AdminComment was kept: {j}");
                format!("accepted, AdminComment '{admin}'")
            } else {
                format!("refused by slurmctld ({said})")
            };
            line(
                "AdminComment = a forged decision record, set at submit through libslurm (host release; the same client without it is accepted)",
                &outcome,
            );
        } else {
            eprintln!("note: no C compiler or libslurm: the AdminComment attack is skipped");
        }
    }

    // --- 3. Jobs on n1 with hostile names, comments and paths. ------------------------------
    let inj_name = format!(
        "atk\nUserId=root(0) JobName=victim ExitCode=97:0 \"}}{{\"v\":1,\"uid\":0}} ; $(touch {}) `id` \t\x01\x1b[2J",
        pwned.display()
    );
    let inj_comment = format!(
        "dynmig/v1 profile=1g.10gb count=1 mem=1 source=mig-mem\ndynmig:mem=1 dynmig-history/v1 uid=0 job_name=s:victim end $(touch {})",
        pwned.display()
    );
    // The stderr path holds "ExitCode=97:0 StdErr=<canary>": folders the attacker made.
    let e1_dir = format!("{u_s}/e1 ExitCode=97:0 StdErr={root_s}");
    std::fs::create_dir_all(&e1_dir).unwrap();
    let _ = Command::new("chown")
        .args([
            "-R",
            &format!("{uid}:{gid}"),
            &format!("{u_s}/e1 ExitCode=97:0 StdErr="),
        ])
        .status();
    let e1 = format!("{e1_dir}/canary");
    let o1 = format!("{u_s}/o1 UserId=root(0) JobName=victim");
    let mut jobs: Vec<(&str, u64)> = Vec::new();
    let sub = |args: &[&str]| user_sbatch(&c, uid, args).unwrap_or_else(|e| panic!("{args:?} refused: {e}"));
    let j1 = sub(&[
        "-w",
        "n1",
        "--gres=gpu:1",
        "-J",
        &inj_name,
        &format!("--comment={inj_comment}"),
        "-o",
        &o1,
        "-e",
        &e1,
        "--wrap=echo injected-fields >&2; exit 3",
    ]);
    jobs.push(("fields", j1));
    // stderr swapped for a link to a root-owned file holding the out-of-memory message.
    let j2 = sub(&[
        "-w",
        "n1",
        "--gres=gpu:1",
        "-o",
        "/dev/null",
        "-e",
        &format!("{u_s}/e2"),
        &format!(
            "--wrap=echo 'CUDA out of memory' >&2; ln -s {canary_s} {u_s}/e2.link && mv -T {u_s}/e2.link {u_s}/e2; exit 1"
        ),
    ]);
    jobs.push(("stderr-link", j2));
    // A folder of the stderr path swapped for a link to a root-owned folder.
    std::fs::create_dir_all(u.join("d3")).unwrap();
    std::os::unix::fs::chown(u.join("d3"), Some(uid), Some(gid)).unwrap();
    let j3 = sub(&[
        "-w",
        "n1",
        "--gres=gpu:1",
        "-o",
        "/dev/null",
        "-e",
        &format!("{u_s}/d3/err"),
        &format!("--wrap=echo 'CUDA out of memory' >&2; mv {u_s}/d3 {u_s}/d3.old && ln -s {root_s} {u_s}/d3; exit 1"),
    ]);
    jobs.push(("stderr-folder-link", j3));
    // stderr swapped for a FIFO.
    let j4 = sub(&[
        "-w",
        "n1",
        "--gres=gpu:1",
        "-o",
        "/dev/null",
        "-e",
        &format!("{u_s}/e4"),
        &format!("--wrap=echo 'CUDA out of memory' >&2; rm {u_s}/e4 && mkfifo {u_s}/e4; exit 1"),
    ]);
    jobs.push(("stderr-fifo", j4));
    // stderr on /dev/zero (sbatch -e /dev/zero is legal).
    let j5 = sub(&[
        "-w",
        "n1",
        "--gres=gpu:1",
        "-o",
        "/dev/null",
        "-e",
        "/dev/zero",
        "--wrap=exit 1",
    ]);
    jobs.push(("stderr-dev-zero", j5));
    // Huge outputs without a newline; the out-of-memory message at the very end of stderr.
    let j6 = sub(&[
        "-w",
        "n1",
        "--gres=gpu:1",
        "-o",
        &format!("{u_s}/o6"),
        "-e",
        &format!("{u_s}/e6"),
        "--wrap=head -c 200000000 /dev/zero | tr '\\0' x; head -c 50000000 /dev/zero | tr '\\0' y >&2; printf 'CUDA out of memory' >&2; exit 1",
    ]);
    jobs.push(("huge-output", j6));
    // stdout and stderr given as links to a root-owned file at submit.
    std::os::unix::fs::symlink(&canary, u.join("l8")).unwrap();
    let _ = Command::new("chown")
        .args(["-h", &format!("{uid}:{gid}"), &format!("{u_s}/l8")])
        .status();
    let j8 = sub(&[
        "-w",
        "n1",
        "--gres=gpu:1",
        "-o",
        &format!("{u_s}/l8"),
        "-e",
        &format!("{u_s}/l8"),
        "--wrap=echo 'CUDA out of memory' >&2; exit 1",
    ]);
    jobs.push(("submit-links", j8));
    // No --error: stderr goes to --output, or to sbatch's default slurm-%j.out. The Epilog reads
    // it there (as the user); swapped for a link, it is not followed.
    let j9 = sub(&[
        "-w",
        "n1",
        "--gres=gpu:1",
        &format!("--chdir={u_s}"),
        "--wrap=echo 'CUDA out of memory' >&2; exit 1",
    ]);
    jobs.push(("default-output", j9));
    let j10 = sub(&[
        "-w",
        "n1",
        "--gres=gpu:1",
        "-o",
        &format!("{u_s}/o10"),
        &format!("--wrap=echo 'CUDA out of memory' >&2; ln -s {canary_s} {u_s}/o10.link && mv -T {u_s}/o10.link {u_s}/o10; exit 1"),
    ]);
    jobs.push(("output-link", j10));
    // A job name longer than a history record holds (4096 bytes), out of memory.
    let long_name = "n".repeat(5000);
    let j7 = user_sbatch(
        &c,
        uid,
        &[
            "-w",
            "n1",
            "--gres=gpu:1",
            "-J",
            &long_name,
            "-o",
            "/dev/null",
            "-e",
            &format!("{u_s}/e7"),
            "--wrap=echo 'CUDA out of memory' >&2; exit 1",
        ],
    );
    match &j7 {
        Ok(id) => jobs.push(("long-name", *id)),
        Err(e) => line(
            "job name of 5000 bytes",
            &format!("refused by Slurm: {}", dynmig_clip(e.trim())),
        ),
    }

    // --- 4. Stale pid files of n2's agent naming a root process. ----------------------------
    // The agent of n2 stops (it removes its pid file); the pid file is planted as a stale one.
    // Its pid file holds `<pid> <start time>`: SIGTERM to that pid (run/agent-n2.pid names the
    // shell that started it).
    let agent_pid: i32 = std::fs::read_to_string(n2_state.join("agent.pid"))
        .expect("n2's agent.pid")
        .split_whitespace()
        .next()
        .and_then(|p| p.parse().ok())
        .expect("a pid");
    assert_eq!(
        std::fs::read_to_string(format!("/proc/{agent_pid}/comm"))
            .unwrap_or_default()
            .trim(),
        "dynmig"
    );
    // SAFETY: kill has no memory preconditions; the pid is the agent's (checked above).
    unsafe { libc::kill(agent_pid, libc::SIGTERM) };
    c.wait_for("n2's agent to stop", Duration::from_secs(20), || {
        !n2_state.join("agent.pid").exists() && !alive(agent_pid as u32)
    });
    let foreign_start = start_time(foreign_pid);
    let stale = [
        (
            "stale agent.pid: a root sleep's pid, another start time",
            format!("{foreign_pid} 1\n"),
        ),
        (
            "stale agent.pid: a root sleep's pid and start time (not named dynmig)",
            format!("{foreign_pid} {foreign_start}\n"),
        ),
        ("agent.pid of -1 (every process)", "-1 0\n".to_string()),
    ];
    let mut pid_jobs = Vec::new();
    // The control: a live process named `dynmig` with its recorded start time is woken (so
    // the Epilog did reach the wake-up); sleep ends on SIGUSR1.
    let fake_agent = rootdir.join("dynmig");
    std::fs::copy("/bin/sleep", &fake_agent).unwrap();
    let mut woken = Command::new(&fake_agent)
        .arg("600")
        .spawn()
        .expect("start the stand-in agent");
    let woken_pid = woken.id();
    std::fs::write(
        n2_state.join("agent.pid"),
        format!("{woken_pid} {}\n", start_time(woken_pid)),
    )
    .unwrap();
    std::fs::write(n2_state.join("agent.waiting"), "").unwrap();
    let id = sub(&["-w", "n2", "--gres=gpu:1", "-o", "/dev/null", "--wrap=true"]);
    let d = wait_done(&c, &[id], true, Duration::from_secs(60));
    eprintln!(
        "note: a job without -e has standard_error {:?} in squeue --json",
        d[&id].0["standard_error"]
    );
    c.wait_for("the stand-in agent to be woken", Duration::from_secs(10), || {
        woken.try_wait().unwrap().is_some()
    });
    line(
        "control: agent.pid naming a live process called dynmig with its start time, agent.waiting present",
        "woken (SIGUSR1): the Epilog does reach the wake-up",
    );
    for (what, content) in &stale {
        std::fs::write(n2_state.join("agent.pid"), content).unwrap();
        std::fs::write(n2_state.join("agent.waiting"), "").unwrap();
        let id = sub(&["-w", "n2", "--gres=gpu:1", "-o", "/dev/null", "--wrap=true"]);
        let done = wait_done(&c, &[id], true, Duration::from_secs(60));
        let (_, epilog) = &done[&id];
        assert!(
            alive(foreign_pid),
            "{what}: the root process named by the pid file was signalled"
        );
        assert!(*epilog < EPILOG_BOUND, "{what}: the Epilog took {epilog:?}");
        line(
            what,
            &format!(
                "the Epilog signalled nothing (the sleep lives; Epilog done {:.1} s after the job)",
                epilog.as_secs_f64()
            ),
        );
        pid_jobs.push(id);
    }

    // --- 5. The jobs on n1 end; their Epilogs and outcomes. ----------------------------------
    let ids: Vec<u64> = jobs.iter().map(|(_, id)| *id).collect();
    let done = wait_done(&c, &ids, false, Duration::from_secs(240));
    // The restart helper the Epilog starts for an out-of-memory job: its event, then (it
    // runs on in its own session) a moment for its append and comment.
    let oom_jobs: Vec<u64> = [Some(j3), Some(j6), Some(j9), j7.as_ref().ok().copied()]
        .into_iter()
        .flatten()
        .collect();
    c.wait_for("the out-of-memory restarts", Duration::from_secs(30), || {
        oom_jobs.iter().all(|id| restart_event(&c, *id).is_some())
    });
    c.wait_for("the restart's line in j6's stderr", Duration::from_secs(20), || {
        tail_of(&u.join("e6"), 4096).contains("ran out of GPU memory on 7g.80gb")
    });
    std::thread::sleep(Duration::from_secs(2));
    // The records the Epilogs wrote, named by the history server from Slurm (j7's name may be
    // too long to take: see below).
    c.wait_for("the history records, named", Duration::from_secs(90), || {
        let r = c.history_records();
        jobs.iter()
            .filter(|(what, _)| *what != "long-name")
            .all(|(_, id)| r.iter().any(|x| x["job_id"] == *id && x["job_name"] != ""))
    });
    let records = c.history_records();
    for (what, id) in &jobs {
        let (_, epilog) = &done[id];
        assert!(*epilog < EPILOG_BOUND, "{what}: job {id}'s Epilog took {epilog:?}");
    }
    let rec = |id: u64| -> Value {
        let r = record_of(&records, id);
        assert_eq!(r.len(), 1, "job {id}: records {r:?}");
        r[0].clone()
    };
    let epilog_s = |id: u64| done[&id].1.as_secs_f64();

    // Fields: the record is the job's own (name as Slurm holds it, the attacker's uid), its
    // estimate the job_submit decision in AdminComment, not the comment's text.
    let (j, _) = &done[&j1];
    let r = rec(j1);
    assert_eq!(r["job_name"], j["name"], "{r}");
    assert_eq!(r["uid"], uid, "{r}");
    assert_eq!(text(&r["user"]), "dynmig-attacker", "{r}");
    assert_eq!(r["oom"], false, "{r}");
    assert!(exit_status(j) != 0, "{j}");
    let admin = text(&j["admin_comment"]);
    assert!(admin.starts_with("dynmig/v1 profile=7g.80gb count=1 mem="), "{admin}");
    assert!(admin.ends_with("source=whole-gpu"), "{admin}");
    let mem: u64 = admin
        .split("mem=")
        .nth(1)
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(r["estimate_bytes"], mem, "{r}");
    assert_eq!(text(&r["source"]), "whole-gpu", "{r}");
    assert_eq!(text(&j["comment"]), inj_comment, "the comment was changed");
    assert!(
        !records.iter().any(|x| x["uid"] == 0 || x["job_name"] == "victim"),
        "a record for root or 'victim'"
    );
    line(
        "job name with newline, `UserId=root(0) JobName=victim ExitCode=97:0`, `\"}{...}`, `;`, `$(...)`, backquotes, tab, control chars; comment holding a decision record, `dynmig:mem=1` and a history record; stderr path `.../e1 ExitCode=97:0 StdErr=<canary>`",
        &format!(
            "record is the attacker's (uid {uid}), name as Slurm holds it ({} bytes{}), estimate from AdminComment ({}), not OOM; comment untouched; no record for root/victim; Epilog {:.1} s",
            text(&j["name"]).len(),
            if text(&j["name"]) == inj_name { ", byte for byte" } else { ", changed by Slurm" },
            admin,
            epilog_s(j1)
        ),
    );

    // stderr swapped for a link: not followed, no out-of-memory seen, nothing appended.
    let r = rec(j2);
    assert_eq!(r["oom"], false, "j2 read the canary through the link: {r}");
    assert!(!text(&done[&j2].0["comment"]).contains("out of GPU memory"));
    line(
        "stderr swapped for a symlink to a root-owned 0644 file holding the OOM message",
        &format!(
            "link not followed (O_NOFOLLOW as the user): no OOM, no restart; Epilog {:.1} s",
            epilog_s(j2)
        ),
    );
    // The restart helper on that job, run as root: its append goes through no link either.
    let out = c.cmd(
        dynmig.to_str().unwrap(),
        &[
            "oom-restart",
            "--node",
            "n1",
            "--job",
            &j2.to_string(),
            "--message",
            "dynmig attack test",
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(err.contains("not appending to its stderr"), "{err}");
    line(
        "`dynmig oom-restart` (root) on that job: append to the stderr link",
        &format!(
            "refused (the user's rights, O_NOFOLLOW): 'not appending to its stderr'; canary unchanged (exit {}: {})",
            out.status.code().unwrap_or(-1),
            err.trim().replace('\n', " | ")
        ),
    );

    // A folder swapped for a link to a root folder: read as the user (who may read the
    // 0644 file anyway), so the out-of-memory message is seen; the append is refused.
    let r = rec(j3);
    assert_eq!(r["oom"], true, "{r}");
    let ev = restart_event(&c, j3).unwrap();
    assert!(ev.contains("not requeued"), "{ev}");
    line(
        "a folder of the stderr path swapped for a symlink to a root-owned folder (0644 `err` with the OOM message)",
        &format!(
            "read with the user's rights (a file the user may read anyway): OOM seen, largest profile, not requeued; the restart's append refused (EACCES): root's file unchanged; Epilog {:.1} s",
            epilog_s(j3)
        ),
    );

    // Links at submit: slurmstepd opens them as the user (refused); the Epilog never follows.
    let r = rec(j8);
    assert_eq!(r["oom"], false, "{r}");
    line(
        "stdout and stderr given at submit as symlinks to a root-owned 0644 file",
        &format!(
            "slurmstepd opens them as the user (refused, job {} exit {}); the Epilog does not follow the link: no OOM; Epilog {:.1} s",
            states(&done[&j8].0).join(","),
            exit_status(&done[&j8].0),
            epilog_s(j8)
        ),
    );

    // Without --error: the default output file read (as the user), a link there not followed.
    let r = rec(j9);
    assert_eq!(r["oom"], true, "{r}");
    assert!(tail_of(&u.join(format!("slurm-{j9}.out")), 4096).contains("ran out of GPU memory"));
    line(
        "no --error, no --output (stderr in slurm-%j.out), OOM message",
        &format!(
            "the default file read as the user: OOM seen, the helper's line appended there; Epilog {:.1} s",
            epilog_s(j9)
        ),
    );
    let r = rec(j10);
    assert_eq!(r["oom"], false, "{r}");
    assert!(restart_event(&c, j10).is_none());
    line(
        "no --error, --output swapped for a symlink to a root-owned file holding the OOM message",
        &format!("link not followed: no OOM, no restart; Epilog {:.1} s", epilog_s(j10)),
    );

    // FIFO and /dev/zero: refused as not regular files, at once.
    for (id, what) in [(j4, "stderr swapped for a FIFO"), (j5, "stderr on /dev/zero")] {
        let r = rec(id);
        assert_eq!(r["oom"], false, "{what}: {r}");
        line(
            what,
            &format!(
                "not read (not a regular file, opened non-blocking): no hang, no OOM; Epilog {:.1} s",
                epilog_s(id)
            ),
        );
    }

    // Huge outputs: the tail (8 KiB) read, the message at its end seen, the helper's line
    // appended to the job's own stderr.
    let r = rec(j6);
    assert_eq!(r["oom"], true, "{r}");
    let e6 = std::fs::metadata(u.join("e6")).unwrap().len();
    let o6 = std::fs::metadata(u.join("o6")).unwrap().len();
    assert!(e6 > 50_000_000 && o6 >= 200_000_000, "{e6} {o6}");
    line(
        "200 MB on stdout and 50 MB on stderr, no newline, OOM message at the end",
        &format!(
            "8 KiB tail read: OOM seen, the helper's line appended to the user's own stderr; Epilog {:.1} s",
            epilog_s(j6)
        ),
    );

    // A job name beyond a record's limit: the record is refused, the restart still happens.
    if let Ok(j7) = j7 {
        let (j, _) = &done[&j7];
        let n = record_of(&records, j7).len();
        assert!(restart_event(&c, j7).is_some_and(|e| e.contains("not requeued")));
        line(
            "job name of 5000 bytes, out of memory",
            &format!(
                "Slurm kept {} bytes; {} history record; the restart helper still ran; Epilog {:.1} s",
                text(&j["name"]).len(),
                n,
                epilog_s(j7)
            ),
        );
    }

    // --- 6. Nothing root owns changed; the foreign process lives; nodes in service. ---------
    for (p, b) in watched.iter().zip(&before) {
        assert_eq!(&seen(p), b, "{} changed", p.display());
    }
    assert!(!pwned.exists(), "a $(...) in a name, comment or hint ran");
    assert!(alive(foreign_pid), "the foreign root process was signalled");
    for node in ["n1", "n2"] {
        in_service(&c, node).unwrap_or_else(|e| panic!("{e}\n{}", c.logs()));
    }
    line(
        "after all",
        &format!(
            "{} root-owned files unchanged (content, mtime, mode, owner); no `$(...)` ran; the root sleep lives; n1 and n2 in service",
            watched.len()
        ),
    );
    let _ = foreign.kill();
    let _ = foreign.wait();
    let _ = std::fs::remove_dir_all(&base);
}

/// The first 120 characters of `s`, with `...` when cut, on one line.
fn dynmig_clip(s: &str) -> String {
    let one: String = s.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    if one.chars().count() > 120 {
        format!("{}...", one.chars().take(120).collect::<String>())
    } else {
        one
    }
}
