//! What the dashboard tests share.
#![allow(dead_code)]

pub mod screens;
