//! The core every other layer stands on, importing nothing above it: the settings
//! ([`config`]), whether Marmoset is on and the re-entrancy guard ([`state`]), the clock, the
//! allocation registry, and the bus that carries records to the listeners attached at start-up.

pub mod bus;
pub mod clock;
pub mod config;
pub mod registry;
pub mod state;
