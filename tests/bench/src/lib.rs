//! Shared pieces of the benchmark programs: a counting allocator for memory figures, raw disk
//! probes ([`disk`]). The PostgreSQL cluster of `dgp-load` is the tests' `weft-pgcluster`.

pub mod disk;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Wraps the system allocator and counts live heap bytes and allocations made.
pub struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static ALLOCS: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size, Ordering::Relaxed);
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Live heap bytes right now (requires `#[global_allocator] static A: Counting = Counting;`).
pub fn live_bytes() -> usize {
    LIVE.load(Ordering::Relaxed)
}

/// Allocations (and reallocations) made so far (requires the [`Counting`] allocator, as
/// [`live_bytes`]).
pub fn allocations() -> usize {
    ALLOCS.load(Ordering::Relaxed)
}
