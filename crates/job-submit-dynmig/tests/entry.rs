//! The exported C entry points, called as slurmctld calls them (with libslurm's allocator).

use std::ffi::{c_char, CString};
use std::sync::Mutex;

use job_submit_dynmig::entry::{fini, init, job_modify, job_submit, NOT_SUPPORTED, REJECT};
use job_submit_dynmig::{state, xalloc};
use slurm_sys::{job_desc_msg_t, SLURM_SUCCESS};

/// Whether these headers' Slurm replaces a job's GRES on update (dynmig_core::modify).
const RETYPE: bool = dynmig_core::modify::update_replaces_gpu_request(slurm_sys::SLURM_VERSION_NUMBER);

/// The tests share the process environment and the plugin's global state.
static GLOBAL: Mutex<()> = Mutex::new(());

fn zeroed() -> job_desc_msg_t {
    // SAFETY: job_desc_msg_t is plain C data; all-zero = every pointer NULL.
    unsafe { std::mem::zeroed() }
}

unsafe fn modify(d: &mut job_desc_msg_t, err: &mut *mut c_char) -> i32 {
    #[cfg(slurm_2302_plus)]
    return job_modify(d, std::ptr::null_mut(), 1000, err);
    #[cfg(not(slurm_2302_plus))]
    {
        let _ = err;
        job_modify(d, std::ptr::null_mut(), 1000)
    }
}

fn with_config<T>(text: &str, f: impl FnOnce() -> T) -> T {
    let _g = GLOBAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let path = std::env::temp_dir().join(format!("dynmig-entry-{}-{}.toml", std::process::id(), text.len()));
    std::fs::write(&path, text).unwrap();
    std::env::set_var(state::CONFIG_ENV, &path);
    assert_eq!(init(), SLURM_SUCCESS, "init never fails");
    let out = f();
    assert_eq!(fini(), SLURM_SUCCESS);
    std::env::remove_var(state::CONFIG_ENV);
    std::fs::remove_file(&path).unwrap();
    out
}

#[test]
fn a_broken_config_does_not_stop_slurmctld_and_only_hinted_jobs_are_refused() {
    with_config("version = 1\nbogus_key = 3\n", || unsafe {
        let env = [CString::new("_SLURM_SPANK_OPTION_dynmig_mig_mem=18G").unwrap()];
        let mut ptrs: Vec<*mut c_char> = env.iter().map(|c| c.as_ptr() as *mut c_char).collect();
        let mut d = zeroed();
        let mut err: *mut c_char = std::ptr::null_mut();
        d.tres_per_node = xalloc::xstrdup("gres:gpu:1");
        assert_eq!(
            job_submit(&mut d, 0, &mut err),
            SLURM_SUCCESS,
            "no hint: passed through"
        );
        assert!(err.is_null());
        assert_eq!(xalloc::borrow(d.tres_per_node), Some("gres:gpu:1"), "left unchanged");
        d.spank_job_env = ptrs.as_mut_ptr();
        d.spank_job_env_size = 1;
        assert_eq!(job_submit(&mut d, 0, &mut err), REJECT, "a hinted job is told why");
        let msg = xalloc::borrow(err).unwrap_or("").to_string();
        assert!(msg.contains("cannot be used now") && msg.contains("bogus_key"), "{msg}");
        d.spank_job_env = std::ptr::null_mut();
        xalloc::xfree(&mut err);
        // An update with a broken config passes through too.
        assert_eq!(modify(&mut d, &mut err), SLURM_SUCCESS);
        xalloc::xfree(&mut d.tres_per_node);
    });
}

const GOOD: &str = "version = 1\n[[node_group]]\nname = \"a\"\nnodes = \"n1\"\ngpu_model = \"A100-80GB\"\ngpus = 1\nbackend = \"simulated\"\n";

#[test]
fn a_users_gres_update_keeps_the_admin_comment_and_is_not_refused_for_it() {
    with_config(GOOD, || unsafe {
        let record = "dynmig/v1 profile=1g.10gb count=1 mem=9663676416 source=mig-mem";
        let mut d = zeroed();
        let mut err: *mut c_char = std::ptr::null_mut();
        // 26.05 moved the job id into step_id.
        #[cfg(not(slurm_2605_plus))]
        {
            d.job_id = 42;
        }
        #[cfg(slurm_2605_plus)]
        {
            d.step_id.job_id = 42;
        }
        d.tres_per_node = xalloc::xstrdup("gres:gpu:3g.40gb:1");
        if !RETYPE {
            // Before 23.02.6 a GPU update is refused with its own code; nothing changes.
            assert_eq!(modify(&mut d, &mut err), NOT_SUPPORTED);
            assert!(d.admin_comment.is_null(), "an update must not set admin_comment");
            assert_eq!(xalloc::borrow(d.tres_per_node), Some("gres:gpu:3g.40gb:1"));
            xalloc::xfree(&mut d.tres_per_node);
            return;
        }
        assert_eq!(modify(&mut d, &mut err), SLURM_SUCCESS);
        assert!(d.admin_comment.is_null(), "an update must not set admin_comment");
        d.admin_comment = xalloc::xstrdup(record);
        xalloc::replace(&mut d.tres_per_node, "gres:gpu:2");
        assert_eq!(modify(&mut d, &mut err), SLURM_SUCCESS);
        assert_eq!(xalloc::borrow(d.admin_comment), Some(record));
        assert_eq!(xalloc::borrow(d.tres_per_node), Some("gres:gpu:7g.80gb:2"));
        assert!(err.is_null());
        xalloc::xfree(&mut d.admin_comment);
        xalloc::xfree(&mut d.tres_per_node);
    });
}

#[test]
fn an_untyped_single_gpu_update_is_refused() {
    with_config(GOOD, || unsafe {
        let mut d = zeroed();
        let mut err: *mut c_char = std::ptr::null_mut();
        d.tres_per_node = xalloc::xstrdup("gres:gpu:1");
        assert_eq!(modify(&mut d, &mut err), if RETYPE { REJECT } else { NOT_SUPPORTED });
        assert!(d.admin_comment.is_null());
        #[cfg(slurm_2302_plus)]
        assert!(xalloc::borrow(err).unwrap_or("").contains("gres=gpu:"));
        xalloc::xfree(&mut err);
        xalloc::xfree(&mut d.tres_per_node);
    });
}

#[test]
fn a_submit_writes_the_admin_comment_only_as_a_decision_record() {
    with_config(GOOD, || unsafe {
        let mut d = zeroed();
        let mut err: *mut c_char = std::ptr::null_mut();
        d.tres_per_node = xalloc::xstrdup("gres:gpu:+1");
        assert_eq!(job_submit(&mut d, 1000, &mut err), SLURM_SUCCESS);
        assert_eq!(xalloc::borrow(d.tres_per_node), Some("gres:gpu:7g.80gb:1"));
        let comment = xalloc::borrow(d.admin_comment).unwrap().to_string();
        let parsed = dynmig_core::protocol::decision::DecisionRecord::parse(&comment).unwrap();
        assert_eq!(parsed.profile, "7g.80gb");
        xalloc::xfree(&mut d.admin_comment);
        xalloc::xfree(&mut d.tres_per_node);
    });
}
