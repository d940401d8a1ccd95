//! placeholder while being written
