//! The core every other layer stands on, importing nothing above it: the settings
//! ([`config`]), whether Marmoset is on and the re-entrancy guard ([`state`]), the clock, the
//! allocation registry, the bus that carries records to the listeners attached at start-up, and
//! the allocator of Marmoset's own buffers ([`own_memory`]), attached at start-up too.

pub mod bus;
pub mod clock;
pub mod config;
pub mod framework;
pub mod own_memory;
pub mod registry;
pub mod state;
