//! Texts that one dynmig process writes and another reads back, each with one encoder and
//! one strict parser, so that no reader scrapes free text.
//!
//! - [`decision`]: what job_submit/dynmig decided for a job, kept in the job's
//!   `AdminComment` (`dynmig/v1 profile=2g.20gb count=1 mem=19327352832 source=mig-mem`).

pub mod decision;
