//! The yardstick (docs/model.md, "Metrics"): the per-class figures a site reads, Feitelson's
//! bounded slowdown, ET's fixed references and the energy price they imply, load levels, the
//! static oracle that is never behind the fair static, and the local search over mixed
//! node layouts.

// The helpers the engine's tests share, from their crate.
#[path = "../../dynmig-sim/tests/common/mod.rs"]
mod common;
use common::linear_power;
use dynmig_core::geometry::{GpuModel, A100_40GB, H100_80GB};
use dynmig_lab::evaluate::{evaluate, EvalOptions, PolicyName};
use dynmig_sim::bounds::bounds;
use dynmig_sim::engine::{simulate, SimConfig};
use dynmig_sim::metrics::{bounded_slowdown, metrics, JobClass, Norm, BSLD_THRESHOLD_S};
use dynmig_sim::model::{Job, JobKind, ModelParams};
use dynmig_sim::policies::PolicySpec;
use dynmig_sim::search::Searcher;
use dynmig_sim::workload::alibaba::pods_of;
use dynmig_sim::workload::{build_workload, Load, Source, Workload};

fn job(release: f64, work: f64, mem_mib: u64, gpus: u32) -> Job {
    Job {
        id: 0,
        release,
        work,
        mem_mib,
        gpus,
        kind: JobKind::Training,
        gamma: 1.0,
        curve: Default::default(),
        due: release + work,
        limit_factor: 1.0,
        exact_slices: None,
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * b.abs().max(1.0)
}

#[test]
fn bounded_slowdown_has_a_threshold_of_ten_seconds() {
    assert_eq!(BSLD_THRESHOLD_S, 10.0);
    // A 2 s job that waited 8 s: (8 + 2) / max(2, 10) = 1, not 5.
    assert!(close(bounded_slowdown(8.0, 2.0, BSLD_THRESHOLD_S), 1.0));
    // ... and 28 s: 30 / 10 = 3.
    assert!(close(bounded_slowdown(28.0, 2.0, BSLD_THRESHOLD_S), 3.0));
    // Past the threshold the run time divides: (10 + 100) / 100.
    assert!(close(bounded_slowdown(10.0, 100.0, BSLD_THRESHOLD_S), 1.1));
    // Never below 1.
    assert!(close(bounded_slowdown(0.0, 5.0, BSLD_THRESHOLD_S), 1.0));
}

#[test]
fn jobs_fall_in_the_classes_a_site_reads() {
    assert_eq!(JobClass::of(&job(0.0, 1.0, 4000, 1), &A100_40GB), JobClass::Slice);
    // More memory than 3g.20gb holds: a whole A100-40GB.
    assert_eq!(JobClass::of(&job(0.0, 1.0, 30_000, 1), &A100_40GB), JobClass::Gpu);
    // The same job fits 3g.40gb on an H100-80GB.
    assert_eq!(JobClass::of(&job(0.0, 1.0, 30_000, 1), &H100_80GB), JobClass::Slice);
    assert_eq!(JobClass::of(&job(0.0, 1.0, 1000, 2), &A100_40GB), JobClass::MultiGpu);
    let mut asks_4g = job(0.0, 1.0, 4000, 1);
    asks_4g.exact_slices = Some(4);
    assert_eq!(JobClass::of(&asks_4g, &A100_40GB), JobClass::Gpu);
}

/// One node of two A100-40GB under `none` (a 7g instance per GPU): a small job runs 0-100 s
/// on GPU 0, a 30 GB job 0-200 s on GPU 1, a two-GPU job released at 10 s waits for both and
/// runs 200-250 s.
#[test]
fn per_class_figures_on_a_hand_made_run() {
    let wl = Workload::new(
        vec![
            job(0.0, 100.0, 4000, 1),
            job(0.0, 200.0, 30_000, 1),
            job(10.0, 50.0, 1000, 2),
        ],
        "three".into(),
    );
    let mut cfg = SimConfig::new(&A100_40GB, 1, 2);
    cfg.power = linear_power();
    let r = simulate(&wl, &PolicySpec::None, &cfg, &|_| {}).unwrap();
    let b = bounds(&wl, cfg.model, 2, &cfg.power);
    let m = metrics(&wl, &r, &b, "", 0.0, &cfg);
    assert_eq!(r.makespan_s, 250.0);
    let names: Vec<&str> = m.classes.iter().map(|c| c.class.as_str()).collect();
    assert_eq!(names, ["all", "slice<=3g", "1 GPU", "multi-GPU"]);
    let (all, slice, gpu, multi) = (&m.classes[0], &m.classes[1], &m.classes[2], &m.classes[3]);
    // Waits 0, 0, 190 s.
    assert_eq!(all.jobs, 3);
    assert_eq!((all.wait_p50_s, all.wait_p95_s, all.wait_max_s), (0.0, 190.0, 190.0));
    assert_eq!(
        (multi.wait_p50_s, multi.wait_p99_s, multi.wait_max_s),
        (190.0, 190.0, 190.0)
    );
    assert_eq!((slice.wait_max_s, gpu.wait_max_s), (0.0, 0.0));
    // Bounded slowdowns 1, 1 and (190 + 50) / 50 = 4.8.
    assert!(close(multi.bsld_mean, 4.8));
    assert!(close(all.bsld_mean, (1.0 + 1.0 + 4.8) / 3.0));
    assert!(close(slice.bsld_p95, 1.0));
    // Work served over 250 s = 250/86400 days: 100, 200 and 2 x 50 full-GPU seconds.
    assert!(close(slice.gpu_h_per_day, 100.0 / 3600.0 / (250.0 / 86400.0)));
    assert!(close(gpu.gpu_h_per_day, 2.0 * slice.gpu_h_per_day));
    assert!(close(multi.gpu_h_per_day, slice.gpu_h_per_day));
    assert!(close(all.gpu_h_per_day, 4.0 * slice.gpu_h_per_day));
    // Compute slices held, of 14 x 250: 7 x 100, 7 x 200, 2 x 7 x 50.
    assert!(close(slice.slice_util, 0.2));
    assert!(close(gpu.slice_util, 0.4));
    assert!(close(multi.slice_util, 0.2));
    assert!(close(all.slice_util, 0.8));
    // No repartition under none.
    assert_eq!((m.reparts_per_node_day, m.idle_gpu_h_per_repartition), (0.0, 0.0));
}

#[test]
fn the_references_imply_an_energy_price() {
    let n = Norm {
        e_ref_j: 2.0e6,
        t_ref_s: 7200.0,
    };
    // 2 MJ per 2 h: 1 MJ per hour of mean tardiness.
    assert!(close(n.mj_per_tardiness_hour(), 1.0));
    // Trading that much energy for an hour of tardiness leaves ET as it was.
    let et = n.et(3.0e6, 5000.0);
    assert!(close(n.et(3.0e6 + 1.0e6, 5000.0 - 3600.0), et));
    assert!(close(n.et(2.0e6, 7200.0), 1.0));
}

#[test]
fn load_levels_give_the_asked_share_of_the_busiest_hour() {
    let pods = pods_of("default").unwrap();
    let m = ModelParams::default();
    let gpus = 128;
    let (_, auto) = build_workload(Source::Trace(&pods), None, Load::Auto { gpus }, 1, &m).unwrap();
    for level in [0.6, 0.8, 0.95] {
        let (wl, f) = build_workload(Source::Trace(&pods), None, Load::Level { gpus, level }, 1, &m).unwrap();
        assert!(close(f, level * auto), "level {level}: factor {f}, auto {auto}");
        let got = wl.peak_gpu_demand() / gpus as f64;
        assert!(
            (got / level - 1.0).abs() < 0.05,
            "level {level}: busiest hour at {got:.3}"
        );
    }
    let (_, one) = build_workload(Source::Trace(&pods), None, Load::Level { gpus, level: 1.0 }, 1, &m).unwrap();
    assert_eq!(one, auto);
}

#[test]
fn a_level_is_asked_as_a_percentage_and_a_bare_number_stays_a_factor() {
    use dynmig_lab::cli::parse_load;
    assert_eq!(parse_load("80%", 128).unwrap(), Load::Level { gpus: 128, level: 0.8 });
    assert_eq!(parse_load("auto", 128).unwrap(), Load::Auto { gpus: 128 });
    assert_eq!(parse_load("0.8", 128).unwrap(), Load::Factor(0.8));
    assert!(parse_load("0%", 128).is_err());
    assert!(parse_load("x%", 128).is_err());
}

/// The last `days` of the default trace at 80% on `nodes` x 8 GPUs.
fn trace_slice(seed: u64, days: f64, nodes: usize) -> Workload {
    let pods = pods_of("default").unwrap();
    let gpus = nodes * 8;
    build_workload(
        Source::Trace(&pods),
        Some(days),
        Load::Level { gpus, level: 0.8 },
        seed,
        &ModelParams::default(),
    )
    .unwrap()
    .0
}

fn synthetic(seed: u64, days: f64) -> Workload {
    build_workload(
        Source::Synthetic(None),
        Some(days),
        Load::Factor(0.1),
        seed,
        &ModelParams::default(),
    )
    .unwrap()
    .0
}

#[test]
fn the_oracles_are_never_behind_the_fair_static_and_the_fair_twice_daily() {
    let models: [&'static GpuModel; 2] = [&A100_40GB, &H100_80GB];
    for seed in [1, 2] {
        for (name, wl, nodes) in [
            ("synthetic", synthetic(seed, 2.0), 2),
            ("default slice", trace_slice(seed, 2.0, 2), 2),
        ] {
            for model in models {
                let cfg = SimConfig::new(model, nodes, 8);
                let o = EvalOptions {
                    policies: vec![
                        PolicyName::None,
                        PolicyName::Static,
                        PolicyName::StaticOracle,
                        PolicyName::TwiceDaily,
                        PolicyName::TwiceDailyOracle,
                    ],
                    search_days: Some((0.0, 1.0)),
                    eval_from_days: Some(1.0),
                    warn: false,
                    static_local_runs: 8,
                    ..Default::default()
                };
                let e = evaluate(&wl, &cfg, &o, &|_, _| {}).unwrap();
                let et = |p: &str| e.rows.iter().find(|m| m.policy == p).unwrap().et;
                let (fair, oracle) = (et("static"), et("static-oracle"));
                assert!(
                    oracle <= fair,
                    "{name}, {}, seed {seed}: oracle {oracle} above fair static {fair}",
                    model.name
                );
                let (fair, oracle) = (et("twice-daily"), et("twice-daily-oracle"));
                assert!(
                    oracle <= fair,
                    "{name}, {}, seed {seed}: twice-daily-oracle {oracle} above fair twice-daily {fair}",
                    model.name
                );
                // The search ranks with the judgement's references.
                let m = &e.rows[0];
                assert_eq!((m.e_ref_j, m.t_ref_s), (e.norm.e_ref_j, e.norm.t_ref_s));
            }
        }
    }
}

#[test]
fn the_local_search_ends_no_worse_than_its_start() {
    let wl = trace_slice(3, 1.0, 2);
    let cfg = SimConfig::new(&A100_40GB, 2, 8);
    let mut s = Searcher::new(&wl, &cfg, "test", false, &|_, _| {}).unwrap();
    s.threads = 2;
    let (ranked, _) = s.statics(&|_, _| {});
    let start = ranked.iter().find(|r| r.name.contains("whole nodes, rest")).unwrap().et;
    let (best, runs) = s.local(&ranked, 10, &|_, _| {});
    assert!(runs <= 10);
    if let Some(b) = best {
        assert!(b.et < start, "local {} not below its start {start}", b.et);
        assert!(b.name.starts_with("local search: "));
    }
    // No budget: nothing run.
    assert_eq!(s.local(&ranked, 0, &|_, _| {}).1, 0);
}

#[test]
fn every_table_leads_with_the_site_figures_and_prints_the_price() {
    let wl = synthetic(1, 2.0);
    let cfg = SimConfig::new(&A100_40GB, 2, 8);
    let o = EvalOptions {
        policies: vec![PolicyName::None, PolicyName::Static],
        search_days: Some((0.0, 1.0)),
        eval_from_days: Some(1.0),
        warn: false,
        static_local_runs: 4,
        ..Default::default()
    };
    let e = evaluate(&wl, &cfg, &o, &|_, _| {}).unwrap();
    for text in [dynmig_lab::report::terminal(&e), dynmig_lab::report::markdown(&e)] {
        let site = text.find("wait p95 h").unwrap();
        let et = text.find("ET/none").unwrap();
        assert!(site < et, "{text}");
        assert!(text.contains("1 h of mean tardiness = "), "{text}");
    }
    let csv = dynmig_lab::report::csv(&e).unwrap();
    let mut r = csv::Reader::from_reader(csv.as_bytes());
    let head: Vec<String> = r.headers().unwrap().iter().map(String::from).collect();
    assert_eq!(head[..2], ["all_jobs", "all_wait_p50_s"]);
    for h in ["multi_bsld_p95", "et", "e_ref_j", "reparts_per_node_day"] {
        assert!(head.iter().any(|x| x == h), "{h} in {head:?}");
    }
    let rows: Vec<csv::StringRecord> = r.records().map(Result::unwrap).collect();
    assert_eq!(rows.len(), 2);
    assert!(rows.iter().all(|x| x.len() == head.len()));
}

#[test]
fn no_design_goes_below_the_floor() {
    let cases: [(&str, Workload, &'static GpuModel); 2] = [
        ("synthetic", synthetic(2, 2.0), &H100_80GB),
        ("default slice", trace_slice(2, 2.0, 2), &A100_40GB),
    ];
    for (name, wl, model) in cases {
        {
            let cfg = SimConfig::new(model, 2, 8);
            let o = EvalOptions {
                policies: vec![
                    PolicyName::None,
                    PolicyName::Static,
                    PolicyName::StaticOracle,
                    PolicyName::Dynamic,
                    PolicyName::Plan,
                ],
                search_days: Some((0.0, 1.0)),
                eval_from_days: Some(1.0),
                warn: false,
                static_local_runs: 4,
                ..Default::default()
            };
            let (cs, floor, ev) = dynmig_lab::ceilings::ceilings(&wl, &cfg, &o).unwrap();
            let floor = floor.unwrap();
            assert!(
                floor.et > 0.0 && floor.et.is_finite(),
                "{name}, {}: floor {}",
                model.name,
                floor.et
            );
            let rows = ev.rows.iter().chain(cs.iter().map(|c| &c.row));
            for r in rows {
                assert!(
                    floor.et <= r.et,
                    "{name}, {}: {} at ET {} below the floor {}",
                    model.name,
                    r.policy,
                    r.et,
                    floor.et
                );
            }
            let text = dynmig_lab::ceilings::markdown(&cs, Some(&floor), &ev);
            assert!(text.lines().last().unwrap().starts_with("| floor"), "{text}");
        }
    }
}

#[test]
fn the_floor_of_one_job_is_its_best_profile_at_its_release() {
    // One judged 5 GiB job, due one full-GPU run after its release: on a whole GPU it is on
    // time; on a slice it is late. The floor takes whichever costs less ET.
    let mut jobs = vec![job(0.0, 600.0, 5 * 1024, 1), job(3600.0, 600.0, 5 * 1024, 1)];
    jobs[1].id = 1;
    let wl = Workload::new(jobs, "two jobs".into());
    let cfg = SimConfig::new(&A100_40GB, 1, 1);
    let b = bounds(&wl, cfg.model, 1, &cfg.power);
    let norm = Norm::of(&wl, &b, 3600.0);
    let f = dynmig_lab::ceilings::floor(&wl, &cfg, &norm, 3600.0).unwrap();
    let idle = cfg.power.idle_w * 600.0;
    let options: Vec<(f64, f64)> = [1u8, 2, 3, 4, 7]
        .iter()
        .map(|&c| {
            let t = wl.jobs[1].time_on(c, 7);
            (idle + cfg.power.instance_lb_w(c) * t, (t - 600.0).max(0.0))
        })
        .collect();
    let best = options
        .iter()
        .map(|&(e, t)| norm.et(e, t))
        .fold(f64::INFINITY, f64::min);
    assert!(close(f.et, best), "floor {} against {best}", f.et);
    // Nothing judged: no floor.
    assert!(dynmig_lab::ceilings::floor(&wl, &cfg, &norm, 7200.0).is_none());
}
