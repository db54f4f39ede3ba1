//! The global allocator of every module: the standard one (dlmalloc), with linear memory grown
//! in large steps.
//!
//! dlmalloc grows linear memory by what one allocation needs (a few 64 KiB pages at a time).
//! V8 runs a full (mark-compact) garbage collection on nearly every `memory.grow` once the
//! memory is past ~64 MiB (`node --trace-gc`: a loop growing a `WebAssembly.Memory` page by
//! page to 300 MiB collects 785 times, ~3 ms each; in steps of 100 pages, 15 times). A registry
//! that retains many finished jobs grows without pause, so its cost per job grew with the
//! number retained. Here, whenever an allocation made the memory grow, one more step is taken
//! at once — an eighth of the memory (1 to 64 MiB), allocated and freed again, so that it
//! becomes dlmalloc's free top chunk. Growing to 300 MiB then takes about a hundred grows
//! instead of ~4,800 (a geometric series up to 512 MiB, then one per 64 MiB).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, Ordering};

/// [`System`], growing linear memory geometrically.
pub struct GrowingAlloc;

#[global_allocator]
static ALLOC: GrowingAlloc = GrowingAlloc;

static RESERVING: AtomicBool = AtomicBool::new(false);

const PAGE: usize = 65536;

fn pages() -> usize {
    core::arch::wasm32::memory_size(0)
}

/// Grows the memory by an eighth (at least 1 MiB, at most 64 MiB) in one `memory.grow`: one
/// allocation of that size through dlmalloc, freed at once (the free block merges into its
/// top chunk; on wasm32 dlmalloc never returns memory).
#[cold]
fn reserve(pages_before: usize) {
    if RESERVING.swap(true, Ordering::Relaxed) {
        return;
    }
    let bytes = (pages_before * PAGE / 8).clamp(1 << 20, 64 << 20);
    if let Ok(layout) = Layout::from_size_align(bytes, 16) {
        // SAFETY: a non-zero-size layout, freed with the same layout.
        unsafe {
            let p = System.alloc(layout);
            if !p.is_null() {
                System.dealloc(p, layout);
            }
        }
    }
    RESERVING.store(false, Ordering::Relaxed);
}

// SAFETY: every call is forwarded to `System`; `reserve` only allocates and frees through it.
unsafe impl GlobalAlloc for GrowingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let before = pages();
        // SAFETY: forwarded with the caller's guarantees.
        let p = unsafe { System.alloc(layout) };
        if pages() != before {
            reserve(before);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let before = pages();
        // SAFETY: forwarded with the caller's guarantees.
        let p = unsafe { System.alloc_zeroed(layout) };
        if pages() != before {
            reserve(before);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let before = pages();
        // SAFETY: forwarded with the caller's guarantees.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if pages() != before {
            reserve(before);
        }
        p
    }
}
