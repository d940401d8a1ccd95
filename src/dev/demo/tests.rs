//! Unit tests of [`super`].

use super::*;

#[test]
fn the_timeline_is_written_beside_the_report_and_linked_from_it() {
    let d = tempfile::tempdir().unwrap();
    let events = Event::parse_lines(include_str!("../../../tests/fixtures/demo-events.jsonl"));
    let config = Config::default_embedded();
    let managed = dynmig_controller::managed_nodes(&config);
    let t0 = events[0].time;
    let section = write_timeline(&d.path().join("report-plan.md"), &events, &managed, t0, t0 + 140.0).unwrap();
    assert!(
        section.contains("## Timeline") && section.contains("](report-plan.svg)"),
        "{section}"
    );
    let svg = std::fs::read_to_string(d.path().join("report-plan.svg")).unwrap();
    let doc = roxmltree::Document::parse(&svg).unwrap();
    let rows = doc
        .descendants()
        .filter(|n| n.has_tag_name("text") && managed.iter().any(|m| n.text().map(str::trim) == Some(&m.name)))
        .count();
    assert_eq!(rows, managed.len(), "one row per node of the config");
    let e = write_timeline(&d.path().join("none/report.md"), &events, &managed, t0, t0 + 1.0).unwrap_err();
    assert!(format!("{e:#}").contains("cannot write"), "{e:#}");
}

#[test]
fn each_repartition_says_what_it_made_whether_it_served_and_the_time_of_each_step() {
    let ev = |t: f64, kind: EventKind| Event::at(t, kind, "n1");
    let events = vec![
        ev(0.0, EventKind::Init).layout("1x7g.80gb,1x7g.80gb"),
        ev(10.0, EventKind::JobEnd).job(1),
        ev(10.5, EventKind::Drain).layout("2x3g.40gb,1x7g.80gb"),
        ev(10.7, EventKind::ApplyStart),
        ev(11.9, EventKind::Applied)
            .layout("2x3g.40gb,1x7g.80gb")
            .detail("2 instance operations, 1.20 s; steps instances=0.010 slurmd_stop=0.100 registration=0.900"),
        ev(13.0, EventKind::JobStart).job(7).detail("3g.40gb@1@gpu0"),
        ev(14.0, EventKind::JobStart).job(8).detail("7g.80gb@0@gpu1"),
        ev(20.0, EventKind::Drain).layout("1x7g.80gb,1x7g.80gb"),
        ev(20.2, EventKind::ApplyStart),
        ev(21.0, EventKind::Applied)
            .layout("1x7g.80gb,1x7g.80gb")
            .detail("2 instance operations, 0.80 s; steps registration=0.700"),
        ev(25.0, EventKind::JobStart).job(9).detail("3g.40gb@1@gpu0"),
    ];
    let reps = repartitions(&events);
    assert_eq!(reps.len(), 2, "{reps:?}");
    assert_eq!(reps[0].made[0].get("3g.40gb"), Some(&2));
    assert!(reps[0].made[1].is_empty(), "GPU 1 kept its 7g");
    assert_eq!(
        reps[0].served,
        vec![(7, "3g.40gb@gpu0".to_string())],
        "job 8 ran on the kept 7g"
    );
    assert!((reps[0].back_s - 1.4).abs() < 1e-9, "{}", reps[0].back_s);
    assert!((reps[0].noticed_s - 0.2).abs() < 1e-9, "{}", reps[0].noticed_s);
    assert_eq!(reps[0].steps.get("slurmd_stop"), Some(Duration::from_millis(100)));
    assert!(
        reps[1].served.is_empty(),
        "the 3g job at 25 s is not on a 7g: {:?}",
        reps[1]
    );
    let text = repartition_section(&events, 0.0);
    assert!(text.contains("job 7 (3g.40gb@gpu0)"), "{text}");
    assert!(text.contains("**no job**"), "{text}");
    assert!(text.contains("Repartitions per node: n1 2."), "{text}");
    assert!(text.contains("| registration | 2 | 0.700 | 0.900 | 0.900 |"), "{text}");
    assert!(text.contains("| slurmd_stop | 1 | 0.100 | 0.100 | 0.100 |"), "{text}");
}

#[test]
fn nearest_rank_quantiles() {
    let v = [5.0, 1.0, 3.0, 2.0, 4.0];
    assert_eq!(quantile(&v, 0.5), 3.0);
    assert_eq!(quantile(&v, 0.95), 5.0);
    assert_eq!(quantile(&[], 0.5), 0.0);
}
