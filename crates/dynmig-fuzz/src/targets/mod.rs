//! The fuzz targets: strategies and property checks.

pub mod parsers;
pub mod plugins;
pub mod wire;
