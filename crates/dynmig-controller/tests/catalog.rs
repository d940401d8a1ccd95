//! The guarded default's catalog in the controller: written for job_submit, pending jobs
//! moved to it where Slurm allows, removed when the policy has none.

use dynmig_controller::{pass, JobFeed, ManagedNode, PassSettings};
use dynmig_core::demand::Demand;
use dynmig_core::geometry::{all_layouts, NodeLayout, A100_80GB};
use dynmig_core::policy::{NodeSnapshot, Policy, Repartition};
use dynmig_core::protocol::catalog::Catalog;
use dynmig_core::protocol::decision::DecisionRecord;
use dynmig_core::types::{DrainMode, EstimateSource};
use dynmig_host::fs::LineLog;
use dynmig_slurm::fake::{pending_job, published_node, FakeSlurm};
use dynmig_slurm::JobInfo;
use std::collections::BTreeSet;
use std::time::Duration;

const GIB: u64 = 1 << 30;

/// A policy that changes nothing and offers `types`.
struct Offers(Option<Vec<&'static str>>);

impl Policy for Offers {
    fn name(&self) -> &'static str {
        "offers"
    }
    fn plan(&mut self, _: &[NodeSnapshot], _: &Demand) -> Vec<Repartition> {
        Vec::new()
    }
    fn catalog(&self) -> Option<BTreeSet<&'static str>> {
        self.0.as_ref().map(|v| v.iter().copied().collect())
    }
}

fn settings(dir: &std::path::Path, retype: bool) -> PassSettings {
    PassSettings {
        drain_timeout: Duration::from_secs(600),
        dry_run: false,
        now: 1000,
        drain: DrainMode::Reservation,
        reservation_duration: Duration::from_secs(600),
        plans: None,
        sweep: false,
        catalog: Some(dir.join("catalog.json")),
        retype,
    }
}

/// A pending job job_submit sized at `mem` GiB to `profile` from `source`.
fn sized(id: u32, profile: &str, mem: u64, source: EstimateSource) -> JobInfo {
    let mut j = pending_job(id, &format!("gres/gpu:{profile}:1"));
    j.submit_time = i64::from(id);
    j.admin_comment = DecisionRecord::new(profile, 1, mem * GIB, source).encode();
    j
}

fn run(slurm: &FakeSlurm, policy: &mut dyn Policy, s: &PassSettings) -> dynmig_controller::PassReport {
    let m = vec![ManagedNode {
        name: "n1".into(),
        model: &A100_80GB,
        gpus: 2,
        allowed: all_layouts(&A100_80GB),
    }];
    let nodes_layout = NodeLayout::parse(&A100_80GB, 2, "1x3g.40gb+1x4g.40gb,1x3g.40gb+1x4g.40gb").unwrap();
    slurm.state.lock().unwrap().nodes = vec![published_node("n1", &nodes_layout)];
    pass(slurm, &m, policy, &mut JobFeed::new(), &LineLog::none(), s).unwrap()
}

fn dir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("dynmig-catalog-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn the_catalog_is_written_and_the_jobs_dynmig_sized_follow_it() {
    let d = dir("follow");
    let jobs = vec![
        // Sized by its --mig-mem at 8 GiB: 1g.10gb, now the smallest catalog type is 3g.40gb.
        sized(1, "1g.10gb", 8, EstimateSource::MigMemHint),
        // The user named the profile: it stays.
        sized(2, "1g.10gb", 8, EstimateSource::MigProfileHint),
        // The user changed the request since (2 instances): theirs, it stays.
        {
            let mut j = sized(3, "1g.10gb", 8, EstimateSource::MigMemHint);
            j.tres_per_node = "gres/gpu:1g.10gb:2".into();
            j
        },
        // Already a catalog type that holds it.
        sized(4, "3g.40gb", 30, EstimateSource::History),
        // No catalog type holds 60 GiB: it keeps its request.
        sized(5, "7g.80gb", 60, EstimateSource::MigMemHint),
        // An administrator's own comment: not dynmig's to move.
        {
            let mut j = pending_job(6, "gres/gpu:1g.10gb:1");
            j.admin_comment = "owner: ops".into();
            j
        },
    ];
    let slurm = FakeSlurm::new(vec![], jobs);
    let s = settings(&d, true);
    let r = run(&slurm, &mut Offers(Some(vec!["3g.40gb", "4g.40gb"])), &s);
    let text = std::fs::read_to_string(d.join("catalog.json")).unwrap();
    assert_eq!(text, r#"{"v":1,"types":{"A100-80GB":["3g.40gb","4g.40gb"]}}"#);
    assert_eq!(Catalog::parse(&text).unwrap().types["A100-80GB"].len(), 2);
    let moved: Vec<(u32, &str, &str)> = r.retyped.iter().map(|x| (x.job, x.from.as_str(), x.to)).collect();
    assert_eq!(moved, vec![(1, "1g.10gb", "3g.40gb")]);
    let st = slurm.state.lock().unwrap();
    let j1 = st.jobs.iter().find(|j| j.id == 1).unwrap();
    assert_eq!(j1.tres_per_node, "gres/gpu:3g.40gb:1");
    let rec = DecisionRecord::parse(&j1.admin_comment).unwrap();
    assert_eq!(rec.profile, "3g.40gb");
    assert_eq!(rec.mem_bytes, 8 * GIB, "the estimate stays what job_submit found");
    assert!(rec.encode().ends_with("prev=1g.10gb by=catalog"), "{}", rec.encode());
    for (id, tres) in [
        (2, "gres/gpu:1g.10gb:1"),
        (3, "gres/gpu:1g.10gb:2"),
        (4, "gres/gpu:3g.40gb:1"),
        (5, "gres/gpu:7g.80gb:1"),
        (6, "gres/gpu:1g.10gb:1"),
    ] {
        assert_eq!(
            st.jobs.iter().find(|j| j.id == id).unwrap().tres_per_node,
            tres,
            "job {id}"
        );
    }
    drop(st);
    // A second pass moves nothing more and leaves the file as it is.
    let r = run(&slurm, &mut Offers(Some(vec!["3g.40gb", "4g.40gb"])), &s);
    assert!(r.retyped.is_empty());
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn where_slurm_cannot_change_a_jobs_type_only_the_catalog_is_written() {
    let d = dir("noretype");
    let slurm = FakeSlurm::new(vec![], vec![sized(1, "1g.10gb", 8, EstimateSource::MigMemHint)]);
    let r = run(&slurm, &mut Offers(Some(vec!["3g.40gb"])), &settings(&d, false));
    assert!(r.retyped.is_empty());
    assert!(d.join("catalog.json").exists());
    assert!(
        !slurm.calls().iter().any(|c| c.starts_with("tres ")),
        "{:?}",
        slurm.calls()
    );
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_policy_without_a_catalog_removes_one_left_behind() {
    let d = dir("remove");
    std::fs::write(d.join("catalog.json"), r#"{"v":1,"types":{"A100-80GB":["3g.40gb"]}}"#).unwrap();
    let slurm = FakeSlurm::new(vec![], vec![sized(1, "1g.10gb", 8, EstimateSource::MigMemHint)]);
    let r = run(&slurm, &mut Offers(None), &settings(&d, true));
    assert!(r.retyped.is_empty());
    assert!(!d.join("catalog.json").exists(), "every profile again for new jobs");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn the_guarded_default_offers_the_types_of_its_base() {
    let mut config = dynmig_core::config::Config::default_embedded();
    config.policy = dynmig_core::config::PolicyConfig::Guarded { node_types: Vec::new() };
    let p = dynmig_controller::policy_from_config(&config).unwrap();
    assert_eq!(p.name(), "guarded");
    let base: BTreeSet<&str> = config.node_groups[0]
        .initial_layout
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(name, _)| name)
        .collect();
    assert_eq!(p.catalog(), Some(base));
}
