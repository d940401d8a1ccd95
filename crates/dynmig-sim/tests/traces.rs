//! Every v2023 pod list parses; a CSV of another format is refused naming the columns.

use dynmig_sim::model::ModelParams;
use dynmig_sim::workload::alibaba::{parse_pods, pods_of, read_pods, POD_COLUMNS};
use dynmig_sim::workload::trace::{trace_workload, TraceParams};
use std::path::PathBuf;

#[test]
fn every_shipped_trace_parses_and_gives_a_workload() {
    for name in dynmig_sim::workload::alibaba::SHIPPED_TRACES {
        let pods = pods_of(name).unwrap();
        assert_eq!(pods.len(), 8152, "{name}");
        // Pods that never ran have no scheduled time (empty field).
        assert!(pods.iter().any(|p| p.scheduled_time.is_none()), "{name}");
        let wl = trace_workload(&pods, &TraceParams::default(), &ModelParams::default()).unwrap();
        assert!(wl.jobs.len() > 5000, "{name}: {}", wl.jobs.len());
    }
    // gpushare40 has more fractional single-GPU pods than the default list.
    let frac = |n: &str| {
        pods_of(n)
            .unwrap()
            .iter()
            .filter(|p| p.num_gpu == 1 && p.gpu_milli < 1000)
            .count()
    };
    assert!(frac("gpushare40") > frac("default"));
    // The publisher's gpushareN lists are ordered by their share of fractional pods.
    assert!(frac("gpushare20") < frac("gpushare40") && frac("gpushare40") < frac("gpushare60"));
}

#[test]
fn empty_optional_fields_parse() {
    let csv =
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time
p0,1,1,1,500,,BE,Pending,950000,,
";
    let p = &parse_pods(csv).unwrap()[0];
    assert_eq!(
        (p.deletion_time, p.scheduled_time, p.gpu_spec.as_str()),
        (None, None, "")
    );
}

#[test]
fn another_csv_is_refused_naming_expected_and_found_columns() {
    let e = parse_pods("sn,cpu_milli,memory_mib,gpu,model\nopenb-node-0000,64000,262144,2,P100\n").unwrap_err();
    let msg = format!("{e:#}");
    assert!(
        msg.contains(&format!("expected columns: {}", POD_COLUMNS.join(","))),
        "{msg}"
    );
    assert!(
        msg.contains("found columns: sn,cpu_milli,memory_mib,gpu,model"),
        "{msg}"
    );
    assert!(msg.contains("missing column(s) name, num_gpu"), "{msg}");
}

#[test]
fn a_node_list_file_is_refused_naming_the_file_and_its_columns() {
    // The header and first rows of the trace's openb_node_list_gpu_node.csv
    // (crates/dynmig-sim/data/README.md names the source).
    let dir = std::env::temp_dir().join(format!("dynmig-traces-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path: PathBuf = dir.join("openb_node_list_gpu_node.csv");
    std::fs::write(
        &path,
        "sn,cpu_milli,memory_mib,gpu,model\nopenb-node-0000,64000,262144,2,P100\nopenb-node-0001,64000,262144,2,P100\n",
    )
    .unwrap();
    let msg = format!("{:#}", read_pods(&path).unwrap_err());
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        msg.contains("expected columns: name,cpu_milli,memory_mib,num_gpu"),
        "{msg}"
    );
    assert!(
        msg.contains("found columns: sn,cpu_milli,memory_mib,gpu,model"),
        "{msg}"
    );
    assert!(msg.contains("openb_node_list_gpu_node.csv"), "{msg}");
}
