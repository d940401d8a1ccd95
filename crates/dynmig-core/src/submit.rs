// One piece: the whole submit decision, from the job's request and hints to the outcome and its record, one path whose steps share the request's parsed fields; its two unit-test modules follow it.
//! The decision job_submit/dynmig makes for each submitted job: which MIG profile its GPU
//! request becomes.
//!
//! The plugin copies the four TRES fields and `spank_job_env` of `job_desc_msg_t` into a
//! [`JobRequest`], calls [`decide`] and applies the [`Outcome`]; a [`SubmitError`] is handed
//! back to the user as it displays (it starts with `dynmig: `).
//!
//! Rules, in order:
//! 1. The hints are read from `spank_env` and checked against the configured GPU models
//!    ([`crate::hints::hints_from_spank_env_for`]); a bad hint is an error, and its message
//!    lists only those models' profiles and formats (`--mig-profile=5g.50gb` on an A100-80GB
//!    cluster: `allowed: 1g.10gb, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb`;
//!    `--mig-dtype=fp8` where no configured model runs fp8).
//! 2. No GPU entry with a count above 0 in any field: [`Outcome::NoGpu`], or an error if a
//!    hint was given (a hint needs a GPU request).
//! 3. A GPU request with a type is left to Slurm ([`Outcome::Unchanged`]): a MIG profile of a
//!    configured model is checked against the hints; a type that looks like a MIG profile
//!    (`3g.40gb`) but no configured model has is an error; another type (`a100`) belongs to
//!    GPUs dynmig does not manage and is left alone (hints are then an error).
//! 4. An untyped request of one GPU (per node, per job, per socket or per task) becomes the
//!    profile the hints say: `--mig-profile` if it is on a configured model (and holds
//!    `--mig-mem` when both are given), else the smallest profile, by memory then compute
//!    slices, over all configured models, whose memory holds `--mig-mem` (within the
//!    controller's catalog, [`SubmitPolicy::catalog`], when one allows a profile that holds
//!    it). The
//!    1-compute-slice double-memory profile (ID [`crate::geometry::DOUBLE_MEMORY_1G_PROFILE_ID`],
//!    `1g.20gb` on A100-80GB) and `+me`
//!    profiles are never picked this way, only when named ([`crate::hints::auto_selectable`]).
//!    Without `--mig-mem`, the estimator ([`crate::estimate`]) tries a model description and
//!    then the history of the same user and job name ([`decide_with`]); with none of them,
//!    [`WholeGpu`] decides.
//! 5. `--gpus=1` (`tres_per_job`) is moved to `tres_per_node` as the typed GRES (the job_desc
//!    field then becomes empty: [`Rewrite::tres_per_job`] is `Some("")`, which the plugin
//!    writes as NULL). A multi-node job with `--gpus=1` thus gets one instance per node.
//! 6. More than one GPU per node, job, socket or task: [`MultiGpu`] decides. Multi-GPU jobs
//!    cannot use MIG instances together, so they get whole-GPU profiles (`7g.80gb`), in the
//!    field they were asked in.
//! 7. GPUs asked for in more than one field, or typed and untyped together: an error.

use crate::config::Config;
use crate::estimate::{describe_breakdown, estimate, EstimateContext};
use crate::geometry::{GpuModel, ProfileSpec};
use crate::gres::{GresEntry, GresError, GresPrefix, TresList};
use crate::hints::{
    hints_from_spank_env_for, is_profile_name, profile_names, shorten, smallest_fitting, smallest_fitting_where,
    HintError, Hints, MAX_QUOTED, MIG_MEM, MIG_MODEL_PARAMS, MIG_PROFILE,
};
use crate::protocol::catalog::Catalog;
use crate::size::{format_size, MIB};
pub use crate::types::{EstimateSource, MultiGpu, WholeGpu};
use std::fmt;

/// What the plugin read from `job_desc_msg_t`. Strings are borrowed for the call.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobRequest<'a> {
    /// `job_desc->tres_per_node` (`--gres`, `--gpus-per-node`), e.g. `"gres:gpu:1"`.
    pub tres_per_node: Option<&'a str>,
    /// `job_desc->tres_per_job` (`--gpus`).
    pub tres_per_job: Option<&'a str>,
    /// `job_desc->tres_per_socket` (`--gpus-per-socket`).
    pub tres_per_socket: Option<&'a str>,
    /// `job_desc->tres_per_task` (`--gpus-per-task`).
    pub tres_per_task: Option<&'a str>,
    /// `NAME=VALUE` entries of `job_desc->spank_job_env`.
    pub spank_env: Vec<&'a str>,
}

/// The submit-time settings ([`SubmitPolicy::from_config`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubmitPolicy {
    /// GPU models of the configured node groups, without repeats, in config order.
    pub models: Vec<&'static GpuModel>,
    /// Single GPU without a hint.
    pub whole_gpu: WholeGpu,
    /// More than one GPU.
    pub multi_gpu: MultiGpu,
    /// Memory assumed for a job without a hint under [`WholeGpu::Estimate`], in bytes.
    pub default_mem_bytes: u64,
    /// The profiles a sized job may be given, per GPU model: the controller's catalog when
    /// the policy's layouts decide them (`kind = "guarded"`); empty: every profile.
    pub catalog: Catalog,
}

impl SubmitPolicy {
    /// The submit-time settings of `config`: the node groups' GPU models (without repeats, in
    /// file order), `[jobs]` and `estimator.default_mem`.
    ///
    /// ```
    /// use dynmig_core::config::Config;
    /// use dynmig_core::submit::SubmitPolicy;
    /// let p = SubmitPolicy::from_config(&Config::default_embedded());
    /// assert_eq!(p.models[0].name, "A100-80GB");
    /// ```
    pub fn from_config(config: &Config) -> Self {
        let mut models: Vec<&'static GpuModel> = Vec::new();
        for g in &config.node_groups {
            if !models.iter().any(|m| m.name == g.gpu_model.name) {
                models.push(g.gpu_model);
            }
        }
        SubmitPolicy {
            models,
            whole_gpu: config.jobs.whole_gpu,
            multi_gpu: config.jobs.multi_gpu,
            default_mem_bytes: config.estimator.default_mem_bytes,
            catalog: Catalog::default(),
        }
    }
}

/// The profile a job gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// MIG profile name, which is the GRES type, e.g. `"2g.20gb"`.
    pub profile: &'static str,
    /// Instances, per unit of the field the request is in (node, job, socket or task).
    pub count: u32,
    /// Estimated GPU memory the job needs, in bytes (the hint, the default, or the profile's).
    pub memory_bytes: u64,
    /// Where the estimate came from.
    pub source: EstimateSource,
}

impl fmt::Display for Decision {
    /// `dynmig: profile=2g.20gb count=1 mem=18.0GiB source=mig-mem`, for logs. The job's
    /// AdminComment is written only as a
    /// [`DecisionRecord`](crate::protocol::decision::DecisionRecord) (exact bytes, strict
    /// parser), never in this form.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "dynmig: profile={} count={} mem={} source={}",
            self.profile,
            self.count,
            format_size(self.memory_bytes),
            self.source
        )
    }
}

/// New values for job_desc's TRES fields. `Some(s)`: replace the field with `s`, where an
/// empty `s` means set it to NULL; `None`: leave the field as it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rewrite {
    /// New `tres_per_node`.
    pub tres_per_node: Option<String>,
    /// New `tres_per_job` (`Some("")` when `--gpus=1` moved to `tres_per_node`).
    pub tres_per_job: Option<String>,
    /// New `tres_per_socket`.
    pub tres_per_socket: Option<String>,
    /// New `tres_per_task`.
    pub tres_per_task: Option<String>,
    /// Why.
    pub decision: Decision,
}

/// What the plugin does with the job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// No GPU asked for: nothing to do.
    NoGpu,
    /// A GPU request dynmig leaves as it is (already typed); `reason` is for the log.
    Unchanged {
        /// Log text, e.g. `"GPU type 2g.20gb already given"`.
        reason: String,
    },
    /// Replace fields of job_desc.
    Rewrite(Rewrite),
}

/// A job dynmig refuses. Display is the complete user-facing message, starting `dynmig: `.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SubmitError {
    /// A bad `--mig-*` value.
    #[error(transparent)]
    Hint(#[from] HintError),
    /// A GPU entry of a TRES field cannot be read.
    #[error("dynmig: {option}: {error}")]
    BadRequest {
        /// The option behind the field, e.g. `--gres`.
        option: &'static str,
        /// What is wrong.
        error: GresError,
    },
    /// A hint without a GPU request.
    #[error("dynmig: --{option} needs a GPU request: add --gres=gpu:1")]
    HintWithoutGpu {
        /// `mig-mem` or `mig-profile`.
        option: &'static str,
    },
    /// `--mig-profile` names a profile no configured model has. [`decide_with`] reads the
    /// hints against the configured models, which refuses such a profile first
    /// ([`HintError::UnknownProfile`], same list); this guards the decision itself.
    #[error("dynmig: --mig-profile={profile}: no GPU of this cluster has that profile; available: {available}")]
    ProfileNotOnCluster {
        /// The profile hint.
        profile: String,
        /// Profiles of the configured models.
        available: String,
    },
    /// A component after the first of a heterogeneous job asks for a MIG GPU
    /// ([`check_het_component`]).
    #[error(
        "dynmig: component {offset} of this heterogeneous job asks for a GPU ({entry}); ask for \
         GPUs in the first component (put its #SBATCH lines before the first '#SBATCH hetjob', or \
         first before ':'): Slurm places the components in order, so a component without GPU can \
         take the only node that holds the MIG profile and the job would wait for good"
    )]
    HetGpuNotFirst {
        /// The component's offset (1 and up).
        offset: u32,
        /// The GPU request as rewritten or read, e.g. `gres:gpu:1g.10gb:1`.
        entry: String,
    },
    /// A GPU type that looks like a MIG profile but no configured model has.
    #[error("dynmig: GPU type '{gres_type}' is not a MIG profile of this cluster's GPUs; available: {available}")]
    TypeNotOnCluster {
        /// The type.
        gres_type: String,
        /// Profiles of the configured models.
        available: String,
    },
    /// `--mig-mem` more than the largest profile.
    #[error(
        "dynmig: {hint} is more than the largest MIG profile of this cluster, {largest} \
         ({largest_mem}); ask for at most {largest_mem}"
    )]
    HintTooLarge {
        /// The hint, e.g. `--mig-mem=100.0GiB`.
        hint: String,
        /// Largest profile name.
        largest: &'static str,
        /// Its memory, formatted.
        largest_mem: String,
    },
    /// A typed GPU request and a hint that disagree.
    #[error("dynmig: the job asks for GPU type {gres_type} and {hint}: {why}; drop the hint or the type")]
    TypedConflict {
        /// The requested type.
        gres_type: String,
        /// The hint, as the option.
        hint: String,
        /// How they disagree.
        why: String,
    },
    /// GPUs asked for in more than one way.
    #[error("dynmig: GPUs are asked for in more than one way ({what}); use one GPU request, e.g. --gres=gpu:1")]
    ConflictingRequests {
        /// The requests, e.g. `--gres gpu:1, --gpus gpu:1`.
        what: String,
    },
    /// The model formula's estimate is more than the largest profile.
    #[error(
        "dynmig: {hint} needs about {need} ({terms}), more than the largest MIG profile of this \
         cluster, {largest} ({largest_mem}); use a smaller batch or sequence, or ask for whole GPUs"
    )]
    ModelTooLarge {
        /// The model hints, as options.
        hint: String,
        /// The estimate, formatted.
        need: String,
        /// The formula's terms.
        terms: String,
        /// Largest profile name.
        largest: &'static str,
        /// Its memory, formatted.
        largest_mem: String,
    },
    /// [`WholeGpu::Reject`] and no hint.
    #[error(
        "dynmig: this cluster shares GPUs as MIG instances: give the GPU memory the job needs \
         with --mig-mem=<size> (e.g. --mig-mem=18G) or a profile with --mig-profile=<name> \
         (available: {available})"
    )]
    HintNeeded {
        /// Profiles of the configured models.
        available: String,
    },
    /// [`MultiGpu::Reject`].
    #[error("dynmig: jobs with more than one GPU ({count} asked for with {option}) are not accepted on this cluster; ask for one GPU")]
    MultiGpuRejected {
        /// GPUs asked for.
        count: u64,
        /// The option behind the field.
        option: &'static str,
    },
    /// A smaller-than-whole profile named for a multi-GPU request.
    #[error(
        "dynmig: --mig-profile={profile} with {count} GPUs: jobs with more than one GPU get \
         whole GPUs ({full}); drop --mig-profile or ask for one GPU"
    )]
    MultiGpuProfile {
        /// The profile hint.
        profile: String,
        /// GPUs asked for.
        count: u64,
        /// The full profiles of the configured models.
        full: String,
    },
    /// The policy names no GPU model (an admin error).
    #[error("dynmig: no GPU model is configured (dynmig.toml has no [[node_group]]); ask the administrators")]
    NoModels,
}

/// The TRES fields of a request, in [`JobRequest`] order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Node,
    Job,
    Socket,
    Task,
}

impl Field {
    const ALL: [Field; 4] = [Field::Node, Field::Job, Field::Socket, Field::Task];

    fn option(self) -> &'static str {
        match self {
            Field::Node => "--gres",
            Field::Job => "--gpus",
            Field::Socket => "--gpus-per-socket",
            Field::Task => "--gpus-per-task",
        }
    }

    fn get<'a>(self, r: &JobRequest<'a>) -> Option<&'a str> {
        match self {
            Field::Node => r.tres_per_node,
            Field::Job => r.tres_per_job,
            Field::Socket => r.tres_per_socket,
            Field::Task => r.tres_per_task,
        }
    }
}

/// Most GPU entries a [`SubmitError::ConflictingRequests`] message lists.
const MAX_LISTED: usize = 4;

/// Decides what happens to a submitted job's GPU request with no history and the default
/// estimator settings. See the [module docs](self) and [`decide_with`].
///
/// # Errors
/// [`SubmitError`], whose Display is the message for the user.
pub fn decide(req: &JobRequest, policy: &SubmitPolicy) -> Result<Outcome, SubmitError> {
    decide_with(req, policy, &EstimateContext::default())
}

/// Decides what happens to a submitted job's GPU request, estimating memory with `cx` (the
/// estimator settings, the job's user and name, and the history snapshot).
///
/// # Errors
/// [`SubmitError`], whose Display is the message for the user.
pub fn decide_with(req: &JobRequest, policy: &SubmitPolicy, cx: &EstimateContext) -> Result<Outcome, SubmitError> {
    // With no model configured the hints are checked as on a login node; a GPU request is
    // then refused below with NoModels.
    let cluster = Some(policy.models.as_slice()).filter(|m| !m.is_empty());
    let hints = hints_from_spank_env_for(&req.spank_env, cluster)?;
    let mut lists: Vec<(Field, TresList)> = Vec::new();
    for field in Field::ALL {
        if let Some(text) = field.get(req) {
            let list = TresList::parse(text).map_err(|error| SubmitError::BadRequest {
                option: field.option(),
                error,
            })?;
            lists.push((field, list));
        }
    }
    let gpus: Vec<(Field, &GresEntry)> = lists
        .iter()
        .flat_map(|(f, l)| l.gpu_entries().filter(|g| g.count > 0).map(move |g| (*f, g)))
        .collect();
    let Some(&(field, entry)) = gpus.first() else {
        return match (hints.mem_bytes, &hints.profile) {
            (_, Some(_)) => Err(SubmitError::HintWithoutGpu { option: MIG_PROFILE }),
            (Some(_), None) => Err(SubmitError::HintWithoutGpu { option: MIG_MEM }),
            (None, None) if hints.model.any() => Err(SubmitError::HintWithoutGpu {
                option: MIG_MODEL_PARAMS,
            }),
            (None, None) => Ok(Outcome::NoGpu),
        };
    };
    if policy.models.is_empty() {
        return Err(SubmitError::NoModels);
    }
    let typed: Vec<&str> = gpus.iter().filter_map(|(_, g)| g.gres_type.as_deref()).collect();
    if gpus.len() > 1 && typed.len() != gpus.len() {
        // At most MAX_LISTED entries, each cut: the TRES fields are the user's and may be huge
        // (found by fuzzing: a 4 kB message for a field of many `gpu:1`).
        let mut what = gpus
            .iter()
            .take(MAX_LISTED)
            .map(|(f, g)| format!("{} {}", f.option(), shorten(&g.to_string(), MAX_QUOTED)))
            .collect::<Vec<_>>()
            .join(", ");
        if gpus.len() > MAX_LISTED {
            what += &format!(" and {} more", gpus.len() - MAX_LISTED);
        }
        return Err(SubmitError::ConflictingRequests { what });
    }
    if !typed.is_empty() {
        return check_typed(&typed, &hints, policy);
    }
    let decision = if entry.count == 1 {
        single_gpu(&hints, policy, cx)?
    } else {
        multi_gpu(entry.count, field, &hints, policy)?
    };
    Ok(Outcome::Rewrite(rewrite(lists, field, decision)))
}

/// Rule 3: every GPU entry is typed.
fn check_typed(types: &[&str], hints: &Hints, policy: &SubmitPolicy) -> Result<Outcome, SubmitError> {
    for t in types {
        // The type is the user's text and may be huge (found by fuzzing): quoted cut.
        let shown = shorten(t, MAX_QUOTED);
        let specs: Vec<&ProfileSpec> = policy.models.iter().filter_map(|m| m.profile(t)).collect();
        if specs.is_empty() {
            if is_profile_name(t) {
                return Err(SubmitError::TypeNotOnCluster {
                    gres_type: shown.clone(),
                    available: available_profiles(policy),
                });
            }
            if let Some(hint) = hints.describe() {
                return Err(SubmitError::TypedConflict {
                    gres_type: shown.clone(),
                    hint,
                    why: format!("'{shown}' is not a MIG profile, so the hint cannot apply"),
                });
            }
            return Ok(Outcome::Unchanged {
                reason: format!("GPU type '{shown}' is not a MIG profile; left to Slurm"),
            });
        }
        if let Some(p) = &hints.profile {
            if !p.eq_ignore_ascii_case(t) {
                return Err(SubmitError::TypedConflict {
                    gres_type: shown.clone(),
                    hint: format!("--{MIG_PROFILE}={p}"),
                    why: "they name different profiles".into(),
                });
            }
        }
        if let Some(mem) = hints.mem_bytes {
            let best = specs.iter().map(|p| p.memory_mib * MIB).max().unwrap_or(0);
            if best < mem {
                return Err(SubmitError::TypedConflict {
                    gres_type: shown.clone(),
                    hint: format!("--{MIG_MEM}={}", format_size(mem)),
                    why: format!("{shown} has only {}", format_size(best)),
                });
            }
        }
    }
    Ok(Outcome::Unchanged {
        reason: format!("GPU type {} already given", shorten(&types.join(","), MAX_QUOTED)),
    })
}

/// Rule 4: one GPU.
fn single_gpu(hints: &Hints, policy: &SubmitPolicy, cx: &EstimateContext) -> Result<Decision, SubmitError> {
    if let Some(name) = &hints.profile {
        let spec = profile_on_cluster(name, policy)?;
        hints.check(&policy.models)?;
        return Ok(Decision {
            profile: spec.name,
            count: 1,
            memory_bytes: hints.mem_bytes.unwrap_or(spec.memory_mib * MIB),
            source: EstimateSource::MigProfileHint,
        });
    }
    let largest = || {
        policy
            .models
            .iter()
            .map(|m| m.full_profile())
            .max_by_key(|p| p.memory_mib)
            .expect("models is not empty")
    };
    let est = estimate(hints, cx);
    let (mem, source) = match (est, policy.whole_gpu) {
        (Some(e), _) if e.source == EstimateSource::Model && smallest_fitting(&policy.models, e.bytes).is_none() => {
            let full = largest();
            return Err(SubmitError::ModelTooLarge {
                hint: model_options(hints),
                need: format_size(e.bytes),
                terms: e.breakdown.as_ref().map(describe_breakdown).unwrap_or_default(),
                largest: full.name,
                largest_mem: format_size(full.memory_mib * MIB),
            });
        }
        // A history that needs more than any profile gets the largest one.
        (Some(e), _) if e.source == EstimateSource::History => (e.bytes.min(largest().memory_mib * MIB), e.source),
        (Some(e), _) => (e.bytes, e.source),
        (None, WholeGpu::Estimate) => (policy.default_mem_bytes, EstimateSource::Default),
        (None, WholeGpu::FullProfile) => {
            let full = policy.models[0].full_profile();
            return Ok(Decision {
                profile: full.name,
                count: 1,
                memory_bytes: full.memory_mib * MIB,
                source: EstimateSource::WholeGpu,
            });
        }
        (None, WholeGpu::Reject) => {
            return Err(SubmitError::HintNeeded {
                available: available_profiles(policy),
            })
        }
    };
    // Within the controller's catalog when one of its types holds the job; else the smallest
    // of all (the job then waits for a layout that has it).
    let (_, spec) = smallest_fitting_where(&policy.models, mem, |m, p| policy.catalog.allows(m, p.name))
        .or_else(|| smallest_fitting(&policy.models, mem))
        .ok_or_else(|| too_large(mem, policy))?;
    Ok(Decision {
        profile: spec.name,
        count: 1,
        memory_bytes: mem,
        source,
    })
}

/// Rule 6: more than one GPU.
fn multi_gpu(count: u64, field: Field, hints: &Hints, policy: &SubmitPolicy) -> Result<Decision, SubmitError> {
    if policy.multi_gpu == MultiGpu::Reject {
        return Err(SubmitError::MultiGpuRejected {
            count,
            option: field.option(),
        });
    }
    let fulls: Vec<&'static ProfileSpec> = policy.models.iter().map(|m| m.full_profile()).collect();
    let full_names = || fulls.iter().map(|p| p.name).collect::<Vec<_>>().join(", ");
    let count32 = u32::try_from(count).unwrap_or(u32::MAX);
    if let Some(name) = &hints.profile {
        let Some(spec) = fulls.iter().find(|p| p.name.eq_ignore_ascii_case(name)) else {
            return Err(SubmitError::MultiGpuProfile {
                profile: name.clone(),
                count,
                full: full_names(),
            });
        };
        hints.check(&policy.models)?;
        let memory_bytes = hints.mem_bytes.unwrap_or(spec.memory_mib * MIB);
        return Ok(Decision {
            profile: spec.name,
            count: count32,
            memory_bytes,
            source: EstimateSource::MigProfileHint,
        });
    }
    let spec = match hints.mem_bytes {
        Some(mem) => fulls
            .iter()
            .filter(|p| p.memory_mib * MIB >= mem)
            .min_by_key(|p| p.memory_mib)
            .ok_or_else(|| too_large(mem, policy))?,
        None => &fulls[0],
    };
    let (memory_bytes, source) = match hints.mem_bytes {
        Some(m) => (m, EstimateSource::MigMemHint),
        None => (spec.memory_mib * MIB, EstimateSource::WholeGpu),
    };
    Ok(Decision {
        profile: spec.name,
        count: count32,
        memory_bytes,
        source,
    })
}

/// The model options as the user would write them, for messages.
fn model_options(hints: &Hints) -> String {
    let Some(spec) = hints.model.spec() else {
        return String::new();
    };
    let params = match spec.params {
        p if p >= 1_000_000_000 => format!("{}B", p as f64 / 1e9),
        p => format!("{}M", p as f64 / 1e6),
    };
    format!(
        "--{MIG_MODEL_PARAMS}={params} --mig-dtype={} --mig-phase={} --mig-batch={} --mig-seq={}",
        spec.dtype, spec.phase, spec.batch, spec.seq
    )
}

/// Applies a decision to the field the request was in (rule 5 moves `--gpus=1`).
fn rewrite(mut lists: Vec<(Field, TresList)>, field: Field, decision: Decision) -> Rewrite {
    let mut out = Rewrite {
        tres_per_node: None,
        tres_per_job: None,
        tres_per_socket: None,
        tres_per_task: None,
        decision,
    };
    let d = &out.decision;
    if field == Field::Job && d.count == 1 {
        let (_, job) = lists
            .iter_mut()
            .find(|(f, _)| *f == Field::Job)
            .expect("request came from this field");
        let removed = job.remove_gpu();
        out.tres_per_job = Some(job.render());
        let mut node = lists
            .iter()
            .find(|(f, _)| *f == Field::Node)
            .map(|(_, l)| l.clone())
            .unwrap_or_default();
        let prefix = removed.iter().map(|g| g.prefix).find(|p| *p != GresPrefix::None);
        node.push(GresEntry {
            prefix: node.prefix().or(prefix).unwrap_or(GresPrefix::Colon),
            name: "gpu".into(),
            gres_type: Some(d.profile.to_string()),
            count: 1,
            count_with_equals: false,
            count_written: true,
        });
        out.tres_per_node = Some(node.render());
        return out;
    }
    let (_, list) = lists
        .iter_mut()
        .find(|(f, _)| *f == field)
        .expect("request came from this field");
    list.set_gpu(Some(d.profile), u64::from(d.count));
    let text = Some(list.render());
    match field {
        Field::Node => out.tres_per_node = text,
        Field::Job => out.tres_per_job = text,
        Field::Socket => out.tres_per_socket = text,
        Field::Task => out.tres_per_task = text,
    }
    out
}

/// Refuses a MIG GPU request in a heterogeneous job's component `offset` > 0 (`None`: not
/// a heterogeneous job; `Some(0)`: its first component, always allowed).
///
/// Why: Slurm gives a heterogeneous job's components distinct nodes and places them in
/// order; a first component without GPU lands on the first node that fits, and when that is
/// the only node holding the later component's MIG profile (the usual case while dynmig
/// makes the profile for the job), the job never starts and its planned start keeps that
/// node from backfill (seen on Slurm 22.05.8, docs/architecture.md "Heterogeneous jobs").
/// With the GPUs in the first component that component picks the node with the profile first.
///
/// # Errors
/// [`SubmitError::HetGpuNotFirst`] when `offset` > 0 and `outcome` involves a GPU.
pub fn check_het_component(offset: Option<u32>, req: &JobRequest, outcome: &Outcome) -> Result<(), SubmitError> {
    let Some(offset) = offset.filter(|&o| o > 0) else {
        return Ok(());
    };
    let entry = match outcome {
        Outcome::NoGpu => return Ok(()),
        Outcome::Rewrite(r) => [&r.tres_per_node, &r.tres_per_job, &r.tres_per_socket, &r.tres_per_task]
            .into_iter()
            .flatten()
            .find(|t| !t.is_empty())
            .cloned()
            .unwrap_or_default(),
        Outcome::Unchanged { .. } => [
            req.tres_per_node,
            req.tres_per_job,
            req.tres_per_socket,
            req.tres_per_task,
        ]
        .into_iter()
        .flatten()
        .find(|t| !t.is_empty())
        .unwrap_or_default()
        .to_string(),
    };
    Err(SubmitError::HetGpuNotFirst {
        offset,
        entry: shorten(&entry, MAX_QUOTED),
    })
}

fn profile_on_cluster(name: &str, policy: &SubmitPolicy) -> Result<&'static ProfileSpec, SubmitError> {
    policy
        .models
        .iter()
        .filter_map(|m| m.profile(name))
        .find(|p| !p.media_extensions)
        .ok_or_else(|| SubmitError::ProfileNotOnCluster {
            profile: shorten(name, MAX_QUOTED),
            available: available_profiles(policy),
        })
}

fn too_large(mem: u64, policy: &SubmitPolicy) -> SubmitError {
    let largest = policy
        .models
        .iter()
        .map(|m| m.full_profile())
        .max_by_key(|p| p.memory_mib)
        .expect("models is not empty");
    SubmitError::HintTooLarge {
        hint: format!("--{MIG_MEM}={}", format_size(mem)),
        largest: largest.name,
        largest_mem: format_size(largest.memory_mib * MIB),
    }
}

/// Profile names of the configured models that dynmig schedules, smallest first
/// ([`profile_names`]).
pub(crate) fn available_profiles(policy: &SubmitPolicy) -> String {
    profile_names(&policy.models).join(", ")
}

#[cfg(test)]
mod tests {
    use super::{decide, JobRequest, SubmitPolicy};
    use crate::config::Config;
    use crate::hints::is_profile_name as looks_like_profile;

    #[test]
    fn a_huge_gpu_type_is_quoted_cut() {
        // Found by crates/dynmig-fuzz (job_submit_entry): the type was quoted whole, twice.
        let policy = SubmitPolicy::from_config(&Config::default_embedded());
        for ty in ["A".repeat(100_000), format!("1g.{}gb", "9".repeat(100_000))] {
            let tres = format!("gres:gpu:{ty}:1");
            for env in [vec!["_SLURM_SPANK_OPTION_dynmig_mig_profile=1g.10gb"], vec![]] {
                let req = JobRequest {
                    tres_per_node: Some(&tres),
                    spank_env: env,
                    ..Default::default()
                };
                let text = match decide(&req, &policy) {
                    Ok(super::Outcome::Unchanged { reason }) => reason,
                    Ok(other) => panic!("{other:?}"),
                    Err(e) => e.to_string(),
                };
                assert!(text.len() < 700, "{} bytes", text.len());
            }
        }
    }

    #[test]
    fn a_conflict_message_lists_at_most_four_entries_each_cut() {
        // Found by crates/dynmig-fuzz (job_submit_entry): every entry was listed, so a huge
        // field made a huge message for err_msg and slurmctld's log.
        let many = vec!["gpu:1"; 5000].join(",");
        let long = format!("gres/gpu:1,gpu:{}:1", "t".repeat(300));
        let policy = SubmitPolicy::from_config(&Config::default_embedded());
        for (field, more) in [(&many, " and 4996 more"), (&long, "")] {
            let req = JobRequest {
                tres_per_task: Some(field),
                ..Default::default()
            };
            let e = decide(&req, &policy).unwrap_err().to_string();
            assert!(
                e.len() < 700 && e.contains("more than one way"),
                "{} bytes: {e}",
                e.len()
            );
            assert!(e.contains(more), "{e}");
        }
    }

    /// The default config with its node group's model replaced by `model`, whose full
    /// profile is `full`.
    fn policy_of(model: &str, full: &str) -> SubmitPolicy {
        let text = crate::config::EXAMPLE_TOML
            .replace("gpu_model = \"A100-80GB\"", &format!("gpu_model = \"{model}\""))
            .replace(
                "initial_layout = \"1x7g.80gb\"",
                &format!("initial_layout = \"1x{full}\""),
            );
        assert!(text.contains(model));
        SubmitPolicy::from_config(&crate::config::parse_config(&text).unwrap())
    }

    fn fp8_job(phase: &'static str) -> JobRequest<'static> {
        let env = match phase {
            "infer" => vec![
                "_SLURM_SPANK_OPTION_dynmig_mig_model_params=7B",
                "_SLURM_SPANK_OPTION_dynmig_mig_dtype=fp8",
                "_SLURM_SPANK_OPTION_dynmig_mig_phase=infer",
            ],
            _ => vec![
                "_SLURM_SPANK_OPTION_dynmig_mig_model_params=1B",
                "_SLURM_SPANK_OPTION_dynmig_mig_dtype=fp8",
            ],
        };
        JobRequest {
            tres_per_node: Some("gres:gpu:1"),
            spank_env: env,
            ..Default::default()
        }
    }

    /// Issue 25: `--mig-dtype=fp8` is refused on the default A100-80GB cluster with the
    /// formats it runs, and sized at 1 byte per weight where the config lists an H100.
    #[test]
    fn fp8_is_refused_on_ampere_and_sized_on_hopper() {
        let a100 = SubmitPolicy::from_config(&Config::default_embedded());
        let e = decide(&fp8_job("infer"), &a100).unwrap_err();
        assert_eq!(
            e.to_string(),
            "dynmig: --mig-dtype=fp8: no GPU model of this cluster runs fp8 (A100-80GB); allowed: fp32, fp16, bf16, int8, int4"
        );
        // Also with a typed request: the format is checked before the type.
        let typed = JobRequest {
            tres_per_node: Some("gres:gpu:3g.40gb:1"),
            ..fp8_job("infer")
        };
        assert!(decide(&typed, &a100).unwrap_err().to_string().contains("runs fp8"));

        let h100 = policy_of("H100-80GB", "7g.80gb");
        assert_eq!(h100.models[0].name, "H100-80GB");
        let Ok(super::Outcome::Rewrite(r)) = decide(&fp8_job("infer"), &h100) else {
            panic!("fp8 refused on an H100 cluster");
        };
        assert_eq!(r.decision.source, crate::types::EstimateSource::Model);
        // 7e9 weights at 1 byte + 16-bit KV cache and transients + context, times the
        // inference margin 1.29: about 11.5e9 bytes, more than the H100's 1g.10gb (9984 MiB),
        // within a 2g.20gb; bf16 needs over 6e9 bytes more, still within the 2g.20gb.
        assert_eq!(r.tres_per_node.as_deref(), Some("gres:gpu:2g.20gb:1"));
        assert!(
            (10_000_000_000..13_000_000_000).contains(&r.decision.memory_bytes),
            "{:?}",
            r.decision
        );
        let bf16 = JobRequest {
            spank_env: fp8_job("infer")
                .spank_env
                .into_iter()
                .map(|e| {
                    if e.ends_with("=fp8") {
                        "_SLURM_SPANK_OPTION_dynmig_mig_dtype=bf16"
                    } else {
                        e
                    }
                })
                .collect(),
            ..fp8_job("infer")
        };
        let Ok(super::Outcome::Rewrite(r16)) = decide(&bf16, &h100) else {
            panic!("bf16 refused");
        };
        assert_eq!(r16.tres_per_node.as_deref(), Some("gres:gpu:2g.20gb:1"));
        assert!(r16.decision.memory_bytes > r.decision.memory_bytes + 6_000_000_000);
        // fp8 training is sized as bf16 training (weights, gradients and Adam state stay
        // in higher precision).
        let Ok(super::Outcome::Rewrite(t)) = decide(&fp8_job("train"), &h100) else {
            panic!("fp8 training refused on an H100 cluster");
        };
        assert!(t.decision.memory_bytes > 16_000_000_000, "{:?}", t.decision);
    }

    /// Issue 25: every list of a refusal names this cluster's profiles only.
    #[test]
    fn refusals_list_the_configured_profiles_only() {
        let a100 = SubmitPolicy::from_config(&Config::default_embedded());
        let only = "1g.10gb, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb";
        let req = |tres: &'static str, env: Vec<&'static str>| JobRequest {
            tres_per_node: Some(tres),
            spank_env: env,
            ..Default::default()
        };
        for (r, policy) in [
            (
                req("gres:gpu:1", vec!["_SLURM_SPANK_OPTION_dynmig_mig_profile=5g.50gb"]),
                &a100,
            ),
            (req("gres:gpu:5g.50gb:1", vec![]), &a100),
            (req("gres:gpu:1g.5gb:1", vec![]), &a100),
        ] {
            let e = decide(&r, policy).unwrap_err().to_string();
            assert!(e.ends_with(only), "{e}");
            assert!(!e.contains("1g.5gb,") && !e.contains("1g.18gb"), "{e}");
        }
        let reject = SubmitPolicy {
            whole_gpu: crate::types::WholeGpu::Reject,
            ..a100.clone()
        };
        let e = decide(&req("gres:gpu:1", vec![]), &reject).unwrap_err().to_string();
        assert!(e.contains(&format!("(available: {only})")), "{e}");
        let h200 = policy_of("H200-141GB", "7g.141gb");
        let e = decide(
            &req("gres:gpu:1", vec!["_SLURM_SPANK_OPTION_dynmig_mig_profile=3g.40gb"]),
            &h200,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.ends_with("allowed: 1g.18gb, 1g.35gb, 2g.35gb, 3g.71gb, 4g.71gb, 7g.141gb"),
            "{e}"
        );
    }

    /// Issue 25: a GRES type is quoted in the refusal and in the log's "unchanged" reason
    /// with its control characters escaped.
    #[test]
    fn gres_types_are_quoted_escaped() {
        let policy = SubmitPolicy::from_config(&Config::default_embedded());
        let req = |tres: &'static str| JobRequest {
            tres_per_node: Some(tres),
            ..Default::default()
        };
        let reason = match decide(&req("gres:gpu:v1\u{1b}[2J:1"), &policy) {
            Ok(super::Outcome::Unchanged { reason }) => reason,
            other => panic!("{other:?}"),
        };
        assert!(
            reason.contains("'v1\\x1b[2J'") && !reason.contains('\u{1b}'),
            "{reason}"
        );
        let e = decide(&req("gres:gpu:1,gpu:x\ny:1"), &policy).unwrap_err().to_string();
        assert!(e.contains("x\\ny") && !e.contains('\n'), "{e}");
    }

    #[test]
    fn profile_shape() {
        assert!(looks_like_profile("3g.40gb"));
        assert!(looks_like_profile("1G.10GB+me"));
        assert!(!looks_like_profile("a100"));
        assert!(!looks_like_profile("g.40gb"));
        assert!(!looks_like_profile("3g.gb"));
    }
}

#[cfg(test)]
mod het_tests {
    use super::*;
    use crate::config::Config;

    #[test]
    fn only_the_first_component_of_a_heterogeneous_job_may_ask_for_a_gpu() {
        let policy = SubmitPolicy::from_config(&Config::default_embedded());
        let req = JobRequest {
            tres_per_node: Some("gres:gpu:1"),
            spank_env: vec!["_SLURM_SPANK_OPTION_dynmig_mig_mem=5G"],
            ..Default::default()
        };
        let outcome = decide(&req, &policy).unwrap();
        assert!(check_het_component(None, &req, &outcome).is_ok());
        assert!(check_het_component(Some(0), &req, &outcome).is_ok());
        let e = check_het_component(Some(1), &req, &outcome).unwrap_err().to_string();
        assert!(
            e.starts_with("dynmig: component 1 of this heterogeneous job asks for a GPU (gres:gpu:"),
            "{e}"
        );
        assert!(e.contains("ask for GPUs in the first component"), "{e}");
        // A typed request Slurm keeps as it is, and no GPU at all.
        let typed = JobRequest {
            tres_per_node: Some("gres:gpu:1g.10gb:1"),
            ..Default::default()
        };
        let o = decide(&typed, &policy).unwrap();
        assert!(check_het_component(Some(2), &typed, &o)
            .unwrap_err()
            .to_string()
            .contains("gres:gpu:1g.10gb:1"));
        let none = JobRequest::default();
        let o = decide(&none, &policy).unwrap();
        assert!(check_het_component(Some(1), &none, &o).is_ok());
    }
}
