//! The drive model lives in `drive/` (geometry, seek curve, scheduler, cache, flash, power);
//! this module keeps the request kind at its old path for the code that imports it here.

pub use crate::drive::IoKind;
