//! Pictures (SVG, drawn with plotters): the cluster's current layouts (`dynmig status --svg`)
//! and the demo report's timeline of each node's layouts and the jobs on each instance.
//!
//! Both draw a GPU as its memory slices (8 on an A100 or H100) stacked: an instance covers the
//! slices of its placement. Agents publish layouts as counts, so an instance's slices are a
//! valid placement as dynmig's placer computes it; a job is drawn on the slices the Prolog
//! claimed (`JobStart` events), which are the hardware's.

use anyhow::{anyhow, Result};
use dynmig_controller::status::{ClusterStatus, NodeState};
use dynmig_controller::ManagedNode;
use dynmig_core::geometry::{place, GpuModel, NodeLayout};
use dynmig_core::protocol::event::{Event, EventKind};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::collections::BTreeMap;

fn err<E: std::fmt::Display>(e: E) -> anyhow::Error {
    anyhow!("drawing SVG: {e}")
}

/// A profile's colour, by its compute slices (`1g` .. `7g`); `+me` variants as their base.
pub fn profile_colour(profile: &str) -> RGBColor {
    match profile.split('g').next().and_then(|c| c.parse::<u8>().ok()) {
        Some(1) => RGBColor(78, 121, 167),
        Some(2) => RGBColor(89, 161, 79),
        Some(3) => RGBColor(242, 142, 43),
        Some(4) => RGBColor(176, 122, 161),
        Some(7) => RGBColor(225, 87, 89),
        _ => RGBColor(140, 140, 140),
    }
}

fn state_colour(s: NodeState) -> RGBColor {
    match s {
        NodeState::Idle => RGBColor(89, 161, 79),
        NodeState::Busy => RGBColor(78, 121, 167),
        NodeState::Draining | NodeState::Repartitioning => RGBColor(242, 142, 43),
        NodeState::Failed => RGBColor(200, 40, 40),
        NodeState::DrainedByAdmin | NodeState::LayoutUnknown => RGBColor(120, 120, 120),
    }
}

/// Text with its top-left corner at `(x, y)`.
fn text(s: &str, x: i32, y: i32, size: u32, colour: RGBColor) -> Text<'static, (i32, i32), String> {
    let style = TextStyle {
        font: ("sans-serif", size).into_font(),
        color: colour.to_backend_color(),
        pos: Pos::new(HPos::Left, VPos::Top),
    };
    Text::new(s.to_string(), (x, y), style)
}

/// Pixels per memory slice in the status picture, and the height of a GPU's bar.
const STATUS_SLICE_W: i32 = 64;
const STATUS_GPU_H: i32 = 28;

/// `dynmig status --svg`: one row per node, top to bottom in the status's order: its name,
/// state and jobs on the left, and each GPU as a bar of memory slices holding its instances
/// (labelled with their profile); a pending plan's target beneath.
///
/// # Errors
/// Drawing fails (it does not, for a string backend, in practice).
pub fn status_svg(st: &ClusterStatus) -> Result<String> {
    let label_w = 230;
    let slices = 8;
    let width = (label_w + STATUS_SLICE_W * slices + 40) as u32;
    let row_h = |n: &dynmig_controller::status::NodeStatus| {
        (n.gpus.len().max(1) as i32) * (STATUS_GPU_H + 4) + if n.plan.is_some() { 40 } else { 24 }
    };
    let height = (50 + st.nodes.iter().map(row_h).sum::<i32>() + 40) as u32;
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (width, height)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let black = RGBColor(20, 20, 20);
        root.draw(&text(
            "dynmig status: layouts per GPU (memory slices)",
            10,
            10,
            18,
            black,
        ))
        .map_err(err)?;
        let mut y = 50;
        for n in &st.nodes {
            let h = row_h(n);
            root.draw(&Rectangle::new(
                [(4, y - 4), (width as i32 - 4, y + h - 12)],
                RGBColor(245, 245, 245).filled(),
            ))
            .map_err(err)?;
            root.draw(&text(&n.name, 10, y, 16, black)).map_err(err)?;
            root.draw(&text(n.state.name(), 10, y + 20, 13, state_colour(n.state)))
                .map_err(err)?;
            let jobs = if n.jobs.is_empty() {
                "no job".to_string()
            } else {
                format!(
                    "jobs {}",
                    n.jobs.iter().map(|j| j.id.to_string()).collect::<Vec<_>>().join(" ")
                )
            };
            root.draw(&text(&jobs, 10, y + 38, 12, black)).map_err(err)?;
            if n.gpus.is_empty() {
                root.draw(&text("layout unknown", label_w, y + 6, 13, black))
                    .map_err(err)?;
            }
            for (i, g) in n.gpus.iter().enumerate() {
                let gy = y + i as i32 * (STATUS_GPU_H + 4);
                root.draw(&text(&format!("GPU {}", g.index), label_w - 50, gy + 7, 12, black))
                    .map_err(err)?;
                root.draw(&Rectangle::new(
                    [(label_w, gy), (label_w + STATUS_SLICE_W * slices, gy + STATUS_GPU_H)],
                    RGBColor(200, 200, 200).stroke_width(1),
                ))
                .map_err(err)?;
                for inst in &g.instances {
                    let x0 = label_w + STATUS_SLICE_W * i32::from(inst.start);
                    let x1 = x0 + STATUS_SLICE_W * i32::from(inst.slices);
                    let c = profile_colour(&inst.profile);
                    root.draw(&Rectangle::new(
                        [(x0 + 1, gy + 1), (x1 - 1, gy + STATUS_GPU_H - 1)],
                        c.filled(),
                    ))
                    .map_err(err)?;
                    root.draw(&text(&inst.profile, x0 + 4, gy + 8, 11, WHITE))
                        .map_err(err)?;
                }
            }
            if let Some(p) = &n.plan {
                let py = y + n.gpus.len().max(1) as i32 * (STATUS_GPU_H + 4) + 2;
                let when = match p.start {
                    Some(s) => format!(" (reservation starts in {} s)", (s - st.time).max(0)),
                    None => String::new(),
                };
                root.draw(&text(
                    &format!("-> {}{when}", p.target),
                    label_w,
                    py,
                    12,
                    RGBColor(242, 142, 43),
                ))
                .map_err(err)?;
            }
            y += h;
        }
        let pending = if st.pending.is_empty() {
            "none".to_string()
        } else {
            st.pending
                .iter()
                .map(|(p, c)| format!("{c}x{p}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        root.draw(&text(&format!("pending demand: {pending}"), 10, y + 4, 13, black))
            .map_err(err)?;
        root.present().map_err(err)?;
    }
    Ok(out)
}

/// One job on one instance, from its `JobStart` to its `JobEnd` (seconds since the epoch).
#[derive(Debug, Clone, PartialEq)]
pub struct JobBar {
    /// Job id.
    pub job: u64,
    /// GPU index.
    pub gpu: usize,
    /// Profile.
    pub profile: String,
    /// First memory slice.
    pub start_slice: u8,
    /// Memory slices.
    pub slices: u8,
    /// Start.
    pub from: f64,
    /// End (the picture's end while it runs).
    pub to: f64,
}

/// One node's history: layouts from a time on, drained intervals, jobs.
#[derive(Debug, Clone)]
pub struct NodeTimeline {
    /// Node name.
    pub name: String,
    /// Its GPU model.
    pub model: &'static GpuModel,
    /// Its GPU count.
    pub gpus: usize,
    /// Layout from each time on (seconds since the epoch), in time order.
    pub layouts: Vec<(f64, NodeLayout)>,
    /// Intervals drained for a repartition: from the drain to the layout's application (or
    /// its failure, its drop, or the picture's end).
    pub drained: Vec<(f64, f64)>,
    /// Jobs on instances.
    pub jobs: Vec<JobBar>,
}

/// A `JobStart` detail's claimed instances: `2g.20gb@2@gpu0 1g.10gb@6@gpu1` -> (gpu,
/// profile, first slice); tokens it cannot read are skipped.
fn claimed(detail: &str) -> Vec<(usize, String, u8)> {
    detail
        .split_whitespace()
        .filter_map(|t| {
            let (rest, gpu) = t.rsplit_once("@gpu")?;
            let (profile, start) = rest.rsplit_once('@')?;
            Some((gpu.parse().ok()?, profile.to_string(), start.parse().ok()?))
        })
        .collect()
}

/// Each managed node's timeline from the event log, between `t0` and `end` (seconds since
/// the epoch): a layout known before `t0` (its `Init`) holds from `t0`.
pub fn timelines(events: &[Event], managed: &[ManagedNode], t0: f64, end: f64) -> Vec<NodeTimeline> {
    managed
        .iter()
        .map(|m| {
            let mut t = NodeTimeline {
                name: m.name.clone(),
                model: m.model,
                gpus: m.gpus,
                layouts: Vec::new(),
                drained: Vec::new(),
                jobs: Vec::new(),
            };
            let mut drain: Option<f64> = None;
            let mut open: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
            for e in events.iter().filter(|e| e.node == m.name) {
                let at = e.time.clamp(t0, end);
                match e.kind {
                    EventKind::Init | EventKind::Applied => {
                        if let Some(l) = e
                            .layout
                            .as_deref()
                            .and_then(|l| NodeLayout::parse(m.model, m.gpus, l).ok())
                        {
                            t.layouts.push((at, l));
                        }
                        if e.kind == EventKind::Applied {
                            if let Some(d) = drain.take() {
                                t.drained.push((d, at));
                            }
                        }
                    }
                    EventKind::Drain => {
                        drain.get_or_insert(at);
                    }
                    EventKind::RepartitionFailed | EventKind::DrainTimeout => {
                        if let Some(d) = drain.take() {
                            t.drained.push((d, at));
                        }
                    }
                    EventKind::JobStart => {
                        let Some(job) = e.job else { continue };
                        for (gpu, profile, start) in claimed(e.detail.as_deref().unwrap_or("")) {
                            let Some(spec) = m.model.profiles.iter().find(|p| p.name == profile) else {
                                continue;
                            };
                            open.entry(job).or_default().push(t.jobs.len());
                            t.jobs.push(JobBar {
                                job,
                                gpu,
                                profile,
                                start_slice: start,
                                slices: spec.memory_slices,
                                from: at,
                                to: end,
                            });
                        }
                    }
                    EventKind::JobEnd => {
                        for i in e.job.and_then(|j| open.remove(&j)).unwrap_or_default() {
                            t.jobs[i].to = at;
                        }
                    }
                    _ => {}
                }
            }
            if let Some(d) = drain {
                t.drained.push((d, end));
            }
            t
        })
        .collect()
}

/// A round step for about `n` ticks over `span` seconds.
fn tick_step(span: f64, n: f64) -> f64 {
    let raw = (span / n).max(1e-9);
    let p = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * p)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * p)
}

/// Pixels per memory slice in the timeline.
const SLICE_H: i32 = 7;

/// The timeline as SVG: one row per node (its name on the left), a band per GPU of its
/// memory slices over time; each layout's instances as outlined light boxes from when it
/// was applied, drained intervals shaded orange, and each job as a box of its profile's
/// colour on its instance's slices, labelled with its id where it fits. The x axis is
/// seconds since `t0`.
///
/// # Errors
/// Drawing fails (it does not, for a string backend, in practice).
pub fn timeline_svg(nodes: &[NodeTimeline], t0: f64, end: f64) -> Result<String> {
    let (left, right, top) = (120, 20, 60);
    let width: i32 = 1200;
    let plot_w = f64::from(width - left - right);
    let span = (end - t0).max(1.0);
    let x = |t: f64| left + ((t - t0).clamp(0.0, span) / span * plot_w).round() as i32;
    let gpu_h = |n: &NodeTimeline| i32::from(n.model.memory_slices) * SLICE_H;
    let row_h = |n: &NodeTimeline| n.gpus as i32 * (gpu_h(n) + 6) + 22;
    let height = top + nodes.iter().map(row_h).sum::<i32>() + 60;
    let black = RGBColor(20, 20, 20);
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (width as u32, height as u32)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        root.draw(&text(
            "Layouts per GPU (memory slices) and the jobs on each instance; orange: drained for a repartition",
            10,
            10,
            15,
            black,
        ))
        .map_err(err)?;
        let mut legend_x = 10;
        for p in ["1g", "2g", "3g", "4g", "7g"] {
            root.draw(&Rectangle::new(
                [(legend_x, 34), (legend_x + 14, 46)],
                profile_colour(p).filled(),
            ))
            .map_err(err)?;
            root.draw(&text(&format!("{p}.*"), legend_x + 18, 33, 12, black))
                .map_err(err)?;
            legend_x += 80;
        }
        let mut y = top;
        for n in nodes {
            let h = row_h(n);
            root.draw(&Rectangle::new(
                [(2, y - 2), (width - 2, y + h - 14)],
                RGBColor(246, 246, 246).filled(),
            ))
            .map_err(err)?;
            root.draw(&text(&n.name, 8, y + 2, 15, black)).map_err(err)?;
            root.draw(&text(n.model.name, 8, y + 20, 11, black)).map_err(err)?;
            for (from, to) in &n.drained {
                root.draw(&Rectangle::new(
                    [(x(*from), y - 2), (x(*to).max(x(*from) + 1), y + h - 14)],
                    RGBColor(242, 142, 43).mix(0.25).filled(),
                ))
                .map_err(err)?;
            }
            let mut labels: Vec<(String, i32, i32)> = Vec::new();
            for g in 0..n.gpus {
                let gy = y + g as i32 * (gpu_h(n) + 6);
                root.draw(&text(&format!("GPU {g}"), left - 46, gy + 2, 11, black))
                    .map_err(err)?;
                root.draw(&Rectangle::new(
                    [(left, gy), (width - right, gy + gpu_h(n))],
                    RGBColor(190, 190, 190).stroke_width(1),
                ))
                .map_err(err)?;
                for (i, (from, layout)) in n.layouts.iter().enumerate() {
                    let to = n.layouts.get(i + 1).map_or(end, |l| l.0);
                    let Some(counts) = layout.gpus.get(g) else { continue };
                    for inst in place(n.model, counts).unwrap_or_default() {
                        let y0 = gy + i32::from(inst.start) * SLICE_H;
                        let y1 = y0 + i32::from(inst.profile.memory_slices) * SLICE_H;
                        let c = profile_colour(inst.profile.name);
                        root.draw(&Rectangle::new([(x(*from), y0), (x(to), y1)], c.mix(0.15).filled()))
                            .map_err(err)?;
                        root.draw(&Rectangle::new(
                            [(x(*from), y0), (x(to), y1)],
                            c.mix(0.6).stroke_width(1),
                        ))
                        .map_err(err)?;
                    }
                    if x(to) - x(*from) > 90 {
                        labels.push((counts.to_string(), x(*from) + 3, gy + 1));
                    }
                }
                for j in n.jobs.iter().filter(|j| j.gpu == g) {
                    let y0 = gy + i32::from(j.start_slice) * SLICE_H + 1;
                    let y1 = y0 + i32::from(j.slices) * SLICE_H - 2;
                    let (x0, x1) = (x(j.from), x(j.to).max(x(j.from) + 2));
                    root.draw(&Rectangle::new(
                        [(x0, y0), (x1, y1)],
                        profile_colour(&j.profile).filled(),
                    ))
                    .map_err(err)?;
                    if x1 - x0 > 26 && y1 - y0 >= 10 {
                        root.draw(&text(&j.job.to_string(), x0 + 2, y0 + 1, 9, WHITE))
                            .map_err(err)?;
                    }
                }
                // Layout names last, on a light backing, so that jobs do not hide them.
                for (label, lx, ly) in labels.drain(..) {
                    let w = (label.len() as f64 * 5.6).ceil() as i32 + 4;
                    root.draw(&Rectangle::new(
                        [(lx - 2, ly), (lx + w, ly + 11)],
                        WHITE.mix(0.8).filled(),
                    ))
                    .map_err(err)?;
                    root.draw(&text(&label, lx, ly, 10, black)).map_err(err)?;
                }
            }
            y += h;
        }
        // Time axis.
        root.draw(&PathElement::new(vec![(left, y), (width - right, y)], black))
            .map_err(err)?;
        let step = tick_step(span, 10.0);
        let mut t = 0.0;
        while t <= span + 1e-9 {
            let tx = x(t0 + t);
            root.draw(&PathElement::new(vec![(tx, y), (tx, y + 5)], black))
                .map_err(err)?;
            root.draw(&text(&format!("{t:.0}"), tx - 8, y + 8, 11, black))
                .map_err(err)?;
            t += step;
        }
        root.draw(&text(
            "seconds since the start",
            left + plot_w as i32 / 2 - 60,
            y + 26,
            12,
            black,
        ))
        .map_err(err)?;
        root.present().map_err(err)?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use dynmig_controller::status::{GpuStatus, InstanceStatus, NodeJob, NodeStatus, PendingPlan, STATUS_VERSION};
    use dynmig_core::geometry::{all_layouts, A100_80GB};

    /// The texts of an SVG's `<text>` elements; the SVG must parse as XML.
    fn texts(svg: &str) -> Vec<String> {
        let doc = roxmltree::Document::parse(svg).unwrap_or_else(|e| panic!("not XML: {e}\n{svg}"));
        assert_eq!(doc.root_element().tag_name().name(), "svg");
        doc.descendants()
            .filter(|n| n.has_tag_name("text"))
            .map(|n| n.text().unwrap_or("").trim().to_string())
            .collect()
    }

    /// Writes `svg` to `$DYNMIG_PICTURES_OUT/name` when that is set (to render and look at).
    fn keep(name: &str, svg: &str) {
        if let Some(dir) = std::env::var_os("DYNMIG_PICTURES_OUT") {
            std::fs::write(std::path::Path::new(&dir).join(name), svg).unwrap();
        }
    }

    fn managed(name: &str) -> ManagedNode {
        ManagedNode {
            name: name.into(),
            model: &A100_80GB,
            gpus: 2,
            allowed: all_layouts(&A100_80GB),
        }
    }

    #[test]
    fn claimed_instances_are_read_from_a_job_start_detail() {
        assert_eq!(
            claimed("2g.20gb@2@gpu0 1g.10gb+me@6@gpu1 junk 3g.40gb@x@gpu0"),
            [(0, "2g.20gb".to_string(), 2), (1, "1g.10gb+me".to_string(), 6)]
        );
    }

    /// A real demo's event log (2 nodes x 2 A100-80GB, 52 jobs, the learned policy).
    #[test]
    fn the_demo_timeline_has_one_row_per_node_with_its_layouts_and_jobs() {
        let text = include_str!("../../tests/fixtures/demo-events.jsonl");
        let events = Event::parse_lines(text);
        let t0 = events[0].time;
        let end = events.iter().map(|e| e.time).fold(t0, f64::max);
        let nodes = timelines(&events, &[managed("n1"), managed("n2")], t0, end);
        assert_eq!(nodes.len(), 2);
        let applied = |n: &str| {
            events
                .iter()
                .filter(|e| e.node == n && matches!(e.kind, EventKind::Init | EventKind::Applied))
                .count()
        };
        assert_eq!(nodes[0].layouts.len(), applied("n1"));
        assert_eq!(nodes[1].layouts.len(), applied("n2"));
        assert!(nodes[0].layouts.len() > 1, "n1 was repartitioned in this run");
        assert_eq!(nodes[0].drained.len(), nodes[0].layouts.len() - 1);
        let jobs: std::collections::BTreeSet<u64> = nodes.iter().flat_map(|n| &n.jobs).map(|j| j.job).collect();
        assert_eq!(jobs.len(), 52, "every job on its instances");
        let bars: usize = nodes.iter().map(|n| n.jobs.len()).sum();
        assert_eq!(bars, 53, "one job held both GPUs of a node");
        assert!(nodes
            .iter()
            .flat_map(|n| &n.jobs)
            .all(|j| j.from <= j.to && j.to < end + 1e-9));
        let svg = timeline_svg(&nodes, t0, end).unwrap();
        keep("timeline.svg", &svg);
        let t = texts(&svg);
        for n in ["n1", "n2"] {
            assert_eq!(t.iter().filter(|s| *s == n).count(), 1, "one row labelled {n}: {t:?}");
        }
        assert_eq!(t.iter().filter(|s| *s == "GPU 0").count(), 2, "{t:?}");
        assert!(t.iter().any(|s| s == "seconds since the start"));
    }

    #[test]
    fn the_status_picture_has_one_row_per_node_and_a_box_per_instance() {
        let gpu = |index: usize, layout: &str, inst: &[(&str, u8, u8)]| GpuStatus {
            index,
            layout: layout.into(),
            instances: inst
                .iter()
                .map(|(p, start, slices)| InstanceStatus {
                    profile: (*p).into(),
                    start: *start,
                    slices: *slices,
                })
                .collect(),
        };
        let node = |name: &str, state: NodeState| NodeStatus {
            name: name.into(),
            model: "A100-80GB".into(),
            state,
            reason: String::new(),
            gpus: vec![
                gpu(0, "1x4g.40gb+1x3g.40gb", &[("4g.40gb", 0, 4), ("3g.40gb", 4, 4)]),
                gpu(1, "1x7g.80gb", &[("7g.80gb", 0, 8)]),
            ],
            jobs: Vec::new(),
            plan: None,
        };
        let mut busy = node("gpu-b", NodeState::Draining);
        busy.jobs.push(NodeJob {
            id: 42,
            user: "alice".into(),
            name: "train".into(),
            gres: "gres:gpu:3g.40gb:1".into(),
            end_time: 200,
        });
        busy.plan = Some(PendingPlan {
            target: "7x1g.10gb,1x7g.80gb".into(),
            reservation: None,
            start: None,
        });
        let mut unknown = node("gpu-c", NodeState::LayoutUnknown);
        unknown.gpus.clear();
        let st = ClusterStatus {
            version: STATUS_VERSION,
            time: 100,
            nodes: vec![node("gpu-a", NodeState::Idle), busy, unknown],
            pending: [("1g.10gb".to_string(), 3)].into(),
            held_idle_instances: 0,
            events: Vec::new(),
        };
        let svg = status_svg(&st).unwrap();
        keep("status.svg", &svg);
        let t = texts(&svg);
        for n in ["gpu-a", "gpu-b", "gpu-c"] {
            assert_eq!(t.iter().filter(|s| *s == n).count(), 1, "one row labelled {n}: {t:?}");
        }
        assert_eq!(
            t.iter().filter(|s| *s == "GPU 0").count(),
            2,
            "two nodes with known layouts"
        );
        assert_eq!(t.iter().filter(|s| *s == "4g.40gb").count(), 2, "{t:?}");
        for s in [
            "draining",
            "jobs 42",
            "layout unknown",
            "-> 7x1g.10gb,1x7g.80gb",
            "pending demand: 3x1g.10gb",
        ] {
            assert!(t.iter().any(|x| x == s), "no text {s:?} in {t:?}");
        }
    }
}
