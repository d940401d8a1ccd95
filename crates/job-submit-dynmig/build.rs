//! Turns the Slurm version found by slurm-sys into cfgs for this crate:
//! `slurm_2302_plus` (job_modify takes `char **err_msg`), `slurm_2311_plus` and
//! `slurm_2605_plus` (the job id of `job_desc_msg_t` moves into `step_id`).
fn main() {
    println!("cargo::rustc-check-cfg=cfg(slurm_2302_plus)");
    println!("cargo::rustc-check-cfg=cfg(slurm_2311_plus)");
    println!("cargo::rustc-check-cfg=cfg(slurm_2605_plus)");
    let text = std::env::var("DEP_SLURM_VERSION_NUMBER").expect("slurm-sys sets version_number");
    let version = u32::from_str_radix(text.trim_start_matches("0x"), 16).expect("hex version");
    if version >= 0x17_02_00 {
        println!("cargo:rustc-cfg=slurm_2302_plus");
    }
    if version >= 0x17_0b_00 {
        println!("cargo:rustc-cfg=slurm_2311_plus");
    }
    if version >= 0x1a_05_00 {
        println!("cargo:rustc-cfg=slurm_2605_plus");
    }
}
