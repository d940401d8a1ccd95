//! Unit tests of [`super`].

use super::*;

#[test]
fn the_whole_queue_is_read_with_at_least_the_queue_timeout_and_the_same_output_cap() {
    let c = SlurmCommands::default();
    assert_eq!(c.queue_limits().timeout, QUEUE_READ_TIMEOUT);
    assert_eq!(c.queue_limits().max_output, c.limits.max_output);
    let longer = SlurmCommands {
        limits: Limits {
            timeout: Duration::from_secs(300),
            max_output: 1 << 20,
        },
        ..SlurmCommands::default()
    };
    assert_eq!(longer.queue_limits(), longer.limits);
}

/// A script at `dir/name` that appends its arguments to `dir/calls` and runs `body`.
fn script(dir: &std::path::Path, name: &str, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let p = dir.join(name);
    std::fs::write(
        &p,
        format!("#!/bin/sh\necho \"{name} $*\" >> {}/calls\n{body}\n", dir.display()),
    )
    .unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

fn calls(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("calls"))
        .unwrap_or_default()
        .lines()
        .map(String::from)
        .collect()
}

fn job_json(id: u32) -> String {
    format!(
        r#"{{"job_id":{id},"job_state":"PENDING","user_id":1000,"group_id":1000,"tres_per_node":"gres:gpu:1g.10gb:1"}}"#
    )
}

/// 22.05's squeue: the whole queue (jobs 1-3) whatever `--jobs` says; `--version` is
/// answered without being recorded.
fn squeue_2205(dir: &std::path::Path) -> PathBuf {
    squeue_of(dir, "22.05.8")
}

fn squeue_of(dir: &std::path::Path, version: &str) -> PathBuf {
    let all = [1, 2, 3].map(job_json).join(",");
    let p = script(dir, "squeue", &format!("echo '{{\"jobs\":[{all}]}}'"));
    let body = std::fs::read_to_string(&p).unwrap().replacen(
        "#!/bin/sh\n",
        &format!("#!/bin/sh\n[ \"$1\" = --version ] && {{ echo 'slurm-wlm {version}'; exit 0; }}\n"),
        1,
    );
    std::fs::write(&p, body).unwrap();
    p
}

/// 22.05's squeue and a reader script running `body`, in `dir`.
fn on_2205_with_reader(dir: &std::path::Path, body: &str) -> SlurmCommands {
    SlurmCommands {
        squeue: squeue_2205(dir),
        one_job_reader: Some(script(dir, "reader", body)),
        ..SlurmCommands::default()
    }
}

#[test]
fn with_the_commands_of_a_later_release_the_reader_is_not_run() {
    let d = tempfile::tempdir().unwrap();
    let c = SlurmCommands {
        squeue: squeue_of(d.path(), "24.11.5"),
        one_job_reader: Some(script(d.path(), "reader", "exit 1")),
        ..SlurmCommands::default()
    };
    assert_eq!(c.job(2).unwrap().unwrap().id, 2);
    assert!(
        calls(d.path()).iter().all(|l| !l.starts_with("reader")),
        "{:?}",
        calls(d.path())
    );
}

#[test]
fn on_2205_one_job_is_read_through_the_reader_and_squeue_is_not_run() {
    let d = tempfile::tempdir().unwrap();
    let c = on_2205_with_reader(d.path(), &format!("echo '{{\"jobs\":[{}]}}'", job_json(2)));
    let j = c.job(2).unwrap().unwrap();
    assert_eq!((j.id, j.uid), (2, Some(1000)));
    assert_eq!(calls(d.path()), ["reader 2"]);
}

#[test]
fn a_reader_not_usable_here_is_asked_once_and_squeue_answers() {
    let d = tempfile::tempdir().unwrap();
    let c = on_2205_with_reader(d.path(), "echo 'not usable here: no libslurm.so.38' >&2; exit 3");
    assert_eq!(c.job(3).unwrap().unwrap().id, 3);
    assert_eq!(c.job(1).unwrap().unwrap().id, 1);
    let seen = calls(d.path());
    assert_eq!(seen.iter().filter(|l| l.starts_with("reader")).count(), 1, "{seen:?}");
    assert_eq!(seen.iter().filter(|l| l.starts_with("squeue")).count(), 2, "{seen:?}");
}

#[test]
fn an_older_reader_that_refuses_the_arguments_is_not_usable_and_squeue_answers() {
    // Seen in a cluster test with a stale build: exit 2 (usage) every pass.
    let d = tempfile::tempdir().unwrap();
    let c = on_2205_with_reader(d.path(), "echo 'usage: dynmig-slurm-job JOB_ID' >&2; exit 2");
    assert_eq!(c.job(3).unwrap().unwrap().id, 3);
    assert_eq!(c.job(3).unwrap().unwrap().id, 3);
    let seen = calls(d.path());
    assert_eq!(seen.iter().filter(|l| l.starts_with("reader")).count(), 1, "{seen:?}");
}

#[test]
fn a_reader_that_fails_otherwise_is_an_error_not_a_fallback() {
    let d = tempfile::tempdir().unwrap();
    let c = on_2205_with_reader(
        d.path(),
        "echo 'slurm_load_job: Unable to contact slurm controller' >&2; exit 1",
    );
    assert!(c.job(2).is_err());
}

#[test]
fn on_2205_changed_jobs_are_read_through_the_reader_once_the_whole_queue_answer_was_seen() {
    let d = tempfile::tempdir().unwrap();
    // Prints jobs 1 and 3 of those asked for (job 9 is gone).
    let reader = script(
        d.path(),
        "reader",
        &format!(
            r#"out=""; for id in "$@"; do case $id in 1) j='{}';; 3) j='{}';; *) continue;; esac; out="${{out:+$out,}}$j"; done; echo "{{\"jobs\":[$out]}}""#,
            job_json(1),
            job_json(3)
        ),
    );
    let c = SlurmCommands {
        squeue: squeue_2205(d.path()),
        one_job_reader: Some(reader),
        ..SlurmCommands::default()
    };
    // The first read learns that squeue answers the whole queue.
    assert_eq!(c.jobs_by_id(&[1]).unwrap().len(), 3);
    assert_eq!(calls(d.path()), ["squeue --json --local --jobs=1"]);
    // Then: one reader call for the changed jobs, none of squeue; a lost job is left out.
    let mut got: Vec<u32> = c.jobs_by_id(&[1, 3, 9]).unwrap().iter().map(|j| j.id).collect();
    got.sort_unstable();
    assert_eq!(got, [1, 3]);
    assert_eq!(calls(d.path()).len(), 2);
    assert!(calls(d.path())[1].starts_with("reader "), "{:?}", calls(d.path()));
    // More changed jobs than ONE_JOB_READS_MAX: the whole queue once.
    let many: Vec<u32> = (1..=ONE_JOB_READS_MAX as u32 + 1).collect();
    c.jobs_by_id(&many).unwrap();
    assert_eq!(calls(d.path()).last().unwrap(), "squeue --json --local --states=all");
}
