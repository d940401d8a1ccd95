//! Tests of the glue on a zeroed `job_desc_msg_t` built here, with strings from Slurm's
//! real allocator (libslurm.so, linked through slurm-sys's `link` feature).

use std::ffi::{c_char, CString};

use dynmig_core::protocol::decision::DecisionRecord;
use dynmig_core::submit::{Decision, Rewrite};
use dynmig_core::types::EstimateSource;
use slurm_sys::job_desc_msg_t;

use super::*;

/// Whether the Slurm of these headers replaces a job's GRES on update (else every GPU update
/// is refused: dynmig_core::modify).
const RETYPE: bool = dynmig_core::modify::update_replaces_gpu_request(slurm_sys::SLURM_VERSION_NUMBER);

/// xmalloc puts `{ magic = 0x42, size }` (two size_t) before the pointer it returns.
/// Checked on Debian's 22.05.8: slurm_xfree clears the word at -16 and frees p - 16.
unsafe fn is_xmalloced(p: *const c_char) -> bool {
    let header = (p as *const usize).offset(-2);
    *header == 0x42 && *header.add(1) > libc_strlen(p)
}

unsafe fn libc_strlen(p: *const c_char) -> usize {
    std::ffi::CStr::from_ptr(p).to_bytes().len()
}

fn zeroed() -> job_desc_msg_t {
    // SAFETY: job_desc_msg_t is plain C data; all-zero = every pointer NULL.
    unsafe { std::mem::zeroed() }
}

unsafe fn s(p: *const c_char) -> Option<String> {
    xalloc::borrow(p).map(str::to_string)
}

/// Frees what the tests put into `desc`, as slurmctld would.
unsafe fn free_all(desc: &mut job_desc_msg_t) {
    for f in [
        &mut desc.tres_per_node,
        &mut desc.tres_per_job,
        &mut desc.tres_per_socket,
        &mut desc.tres_per_task,
        &mut desc.admin_comment,
    ] {
        xalloc::xfree(f);
    }
}

fn ready() -> Ready {
    crate::state::load(None, std::path::Path::new("/nonexistent/dynmig.toml")).unwrap()
}

#[test]
fn reads_fields_and_spank_env() {
    let env = [
        CString::new("_SLURM_SPANK_OPTION_dynmig_mig_mem=18G").unwrap(),
        CString::new("OTHER=1").unwrap(),
    ];
    let mut ptrs: Vec<*mut c_char> = env.iter().map(|c| c.as_ptr() as *mut c_char).collect();
    let mut d = zeroed();
    unsafe {
        d.tres_per_node = xalloc::xstrdup("gres:gpu:1");
        d.spank_job_env = ptrs.as_mut_ptr();
        d.spank_job_env_size = 2;
        {
            let f = fields(&d);
            let r = f.request();
            assert_eq!(r.tres_per_node, Some("gres:gpu:1"));
            assert_eq!(r.tres_per_job, None);
            assert_eq!(r.spank_env, vec!["_SLURM_SPANK_OPTION_dynmig_mig_mem=18G", "OTHER=1"]);
        }
        d.spank_job_env = std::ptr::null_mut();
        assert!(fields(&d).request().spank_env.is_empty());
        free_all(&mut d);
    }
}

#[test]
fn apply_tres_replaces_and_frees_and_leaves_the_admin_comment() {
    let mut d = zeroed();
    unsafe {
        d.tres_per_node = xalloc::xstrdup("gres:gpu:1");
        d.tres_per_job = xalloc::xstrdup("gres:gpu:1");
        d.tres_per_task = xalloc::xstrdup("gres:gpu:1");
        d.admin_comment = xalloc::xstrdup("site note");
        let task_before = d.tres_per_task;
        let rw = Rewrite {
            tres_per_node: Some("gres:gpu:2g.20gb:1".into()),
            tres_per_job: Some(String::new()),
            tres_per_socket: None,
            tres_per_task: None,
            decision: Decision {
                profile: "2g.20gb",
                count: 1,
                memory_bytes: 18 << 30,
                source: EstimateSource::MigMemHint,
            },
        };
        apply_tres(&mut d, &rw);
        assert_eq!(s(d.tres_per_node).as_deref(), Some("gres:gpu:2g.20gb:1"));
        assert!(is_xmalloced(d.tres_per_node), "new string from xstrdup");
        assert!(d.tres_per_job.is_null(), "Some(\"\") frees and leaves NULL");
        assert!(d.tres_per_socket.is_null());
        assert_eq!(d.tres_per_task, task_before, "None leaves the pointer itself");
        assert_eq!(s(d.admin_comment).as_deref(), Some("site note"));
        free_all(&mut d);
        assert!(d.tres_per_node.is_null() && d.admin_comment.is_null());
    }
}

#[test]
fn submit_writes_the_decision_record_into_an_empty_admin_comment() {
    let env = [CString::new("_SLURM_SPANK_OPTION_dynmig_mig_mem=9G").unwrap()];
    let mut ptrs: Vec<*mut c_char> = env.iter().map(|c| c.as_ptr() as *mut c_char).collect();
    let mut d = zeroed();
    unsafe {
        d.tres_per_node = xalloc::xstrdup("gres:gpu:1");
        d.spank_job_env = ptrs.as_mut_ptr();
        d.spank_job_env_size = 1;
        let Handled::Rewritten {
            record,
            in_admin_comment,
        } = submit(&mut d, &ready()).unwrap()
        else {
            panic!("expected a rewrite");
        };
        // The embedded config has A100-80GB nodes: 9 GiB fits 1g.10gb.
        assert_eq!(s(d.tres_per_node).as_deref(), Some("gres:gpu:1g.10gb:1"));
        assert!(in_admin_comment);
        let comment = s(d.admin_comment).unwrap();
        assert_eq!(
            comment,
            "dynmig/v1 profile=1g.10gb count=1 mem=9663676416 source=mig-mem"
        );
        assert_eq!(DecisionRecord::parse(&comment).unwrap(), record);
        assert!(is_xmalloced(d.admin_comment));
        d.spank_job_env = std::ptr::null_mut();
        free_all(&mut d);
    }
}

#[test]
fn an_operators_admin_comment_set_at_submit_survives() {
    let mut d = zeroed();
    unsafe {
        d.tres_per_node = xalloc::xstrdup("gres:gpu:2");
        d.admin_comment = xalloc::xstrdup("billing: project 42");
        let Handled::Rewritten { in_admin_comment, .. } = submit(&mut d, &ready()).unwrap() else {
            panic!("expected a rewrite");
        };
        assert!(!in_admin_comment);
        assert_eq!(s(d.admin_comment).as_deref(), Some("billing: project 42"));
        assert_eq!(s(d.tres_per_node).as_deref(), Some("gres:gpu:7g.80gb:2"));
        free_all(&mut d);
    }
}

#[test]
fn update_never_writes_admin_comment() {
    let mut d = zeroed();
    unsafe {
        for comment in [
            None,
            Some("dynmig/v1 profile=1g.10gb count=1 mem=9663676416 source=mig-mem"),
        ] {
            d.tres_per_node = xalloc::xstrdup("gres:gpu:2");
            d.admin_comment = comment.map_or(std::ptr::null_mut(), |c| xalloc::xstrdup(c));
            let before = d.admin_comment;
            if !RETYPE {
                // Before 23.02.6 every GPU update is refused, the description untouched.
                let e = update(&mut d, &ready()).unwrap_err();
                assert!(
                    matches!(e, Refusal::Update(UpdateError::ReleaseKeepsOldRequest { .. })),
                    "{e:?}"
                );
                assert_eq!(d.admin_comment, before, "the very same pointer: untouched");
                assert_eq!(s(d.tres_per_node).as_deref(), Some("gres:gpu:2"));
                free_all(&mut d);
                continue;
            }
            let Handled::Rewritten { in_admin_comment, .. } = update(&mut d, &ready()).unwrap() else {
                panic!("expected a rewrite");
            };
            assert!(!in_admin_comment);
            assert_eq!(d.admin_comment, before, "the very same pointer: untouched");
            assert_eq!(s(d.tres_per_node).as_deref(), Some("gres:gpu:7g.80gb:2"));
            free_all(&mut d);
        }
    }
}

#[test]
fn an_untyped_single_gpu_update_is_refused_and_desc_is_untouched() {
    let mut d = zeroed();
    unsafe {
        d.tres_per_node = xalloc::xstrdup("gres:gpu:1");
        let before = d.tres_per_node;
        let e = update(&mut d, &ready()).unwrap_err().to_string();
        let want = if RETYPE {
            "gres=gpu:2g.20gb:1"
        } else {
            "cancel the job and submit it again"
        };
        assert!(e.contains(want), "{e}");
        assert_eq!(d.tres_per_node, before);
        assert!(d.admin_comment.is_null());
        free_all(&mut d);
    }
}

#[test]
fn non_utf8_tres_in_a_gpu_field_is_refused_not_treated_as_absent() {
    let mut d = zeroed();
    unsafe {
        // "gres:gpu:1,gres:x\xff:1" with a byte that is not UTF-8.
        let raw = std::ffi::CString::new(b"gres:gpu:1,gres:x\xff:1".to_vec()).unwrap();
        d.tres_per_node = slurm_sys::slurm_xstrdup(raw.as_ptr());
        let before = d.tres_per_node;
        let e = submit(&mut d, &ready()).unwrap_err();
        assert!(matches!(e, Refusal::NotUtf8 { option: "--gres", .. }), "{e:?}");
        assert!(e.to_string().contains("not UTF-8"), "{e}");
        assert_eq!(d.tres_per_node, before);
        assert!(d.admin_comment.is_null());
        // Without a GPU anywhere the job is not dynmig's business.
        let raw = std::ffi::CString::new(b"gres:x\xff:1".to_vec()).unwrap();
        xalloc::xfree(&mut d.tres_per_node);
        d.tres_per_node = slurm_sys::slurm_xstrdup(raw.as_ptr());
        assert_eq!(submit(&mut d, &ready()).unwrap(), Handled::NoGpu);
        free_all(&mut d);
    }
}

#[test]
fn submit_leaves_non_gpu_jobs_alone() {
    let mut d = zeroed();
    unsafe {
        assert_eq!(submit(&mut d, &ready()).unwrap(), Handled::NoGpu);
        assert!(d.admin_comment.is_null());
    }
}

#[test]
fn bad_hint_is_an_error_and_desc_is_untouched() {
    let env = [CString::new("_SLURM_SPANK_OPTION_dynmig_mig_mem=18Q").unwrap()];
    let mut ptrs: Vec<*mut c_char> = env.iter().map(|c| c.as_ptr() as *mut c_char).collect();
    let mut d = zeroed();
    unsafe {
        d.tres_per_node = xalloc::xstrdup("gres:gpu:1");
        let before = d.tres_per_node;
        d.spank_job_env = ptrs.as_mut_ptr();
        d.spank_job_env_size = 1;
        let err = submit(&mut d, &ready()).unwrap_err().to_string();
        assert!(err.starts_with("dynmig: --mig-mem=18Q"), "{err}");
        assert_eq!(d.tres_per_node, before);
        assert!(d.admin_comment.is_null());
        d.spank_job_env = std::ptr::null_mut();
        free_all(&mut d);
    }
}

#[test]
fn err_msg_is_set_or_appended_with_slurm_strings() {
    unsafe {
        let mut msg: *mut c_char = std::ptr::null_mut();
        set_err_msg(&mut msg, "dynmig: first");
        assert_eq!(s(msg).as_deref(), Some("dynmig: first"));
        assert!(is_xmalloced(msg));
        set_err_msg(&mut msg, "dynmig: second");
        assert_eq!(s(msg).as_deref(), Some("dynmig: first; dynmig: second"));
        assert!(is_xmalloced(msg));
        xalloc::xfree(&mut msg);
        set_err_msg(std::ptr::null_mut(), "ignored, no slot");
    }
}
