//! Tests of the BFC model against the real allocator's rules: bins, the central gap of
//! a spatially partitioned pool (carved exactly, handed out whole, rejoined), the upper
//! end growing down, region growth and its back-off.

use super::*;

#[test]
fn bins_match_bin_num_for_size() {
    assert_eq!(bin_for_size(1), 0);
    assert_eq!(bin_for_size(256), 0);
    assert_eq!(bin_for_size(511), 0);
    assert_eq!(bin_for_size(512), 1);
    assert_eq!(bin_for_size(256 << 20), 20);
    assert_eq!(bin_for_size(1 << 40), 20);
    for b in 0..NUM_BINS {
        assert_eq!(bin_for_size(bin_size(b)), b);
        assert_eq!(bin_for_size(bin_size(b) * 2 - 1), b);
    }
}

#[test]
fn spatial_pool_carves_gap_exactly_and_frees_rejoin_it() {
    let mut a = Bfc::new(BfcConfig::jax(1 << 30, true));
    let x = a.allocate(1000, End::Lower).unwrap();
    assert_eq!(a.chunk_size(x), 1024);
    assert_eq!(a.central_gap_bytes(), (1 << 30) - 1024);
    let y = a.allocate(300 << 20, End::Lower).unwrap();
    let z = a.allocate(4096, End::Lower).unwrap();
    // y is interior: freeing it makes a lower hole, not part of the gap.
    a.deallocate(y);
    assert_eq!(a.largest_binned_free(Some(Tag::Lower)), 300 << 20);
    a.check().unwrap();
    // A small request reuses the hole (best fit among same-tag holes comes first)
    // and splits it (>= 2x).
    let w = a.allocate(1 << 20, End::Lower).unwrap();
    assert_eq!(a.chunk_size(w), 1 << 20);
    a.deallocate(w);
    // Freeing z (the boundary) cascades the hole back into the gap.
    a.deallocate(z);
    assert_eq!(a.largest_binned_free(None), 0);
    assert_eq!(a.central_gap_bytes(), (1 << 30) - 1024);
    a.deallocate(x);
    assert_eq!(a.central_gap_bytes(), 1 << 30);
    a.check().unwrap();
}

#[test]
fn lower_end_takes_a_small_enough_gap_whole() {
    // Gap 1 GiB - 1 MiB, request 1 GiB - 100 MiB: under twice the request, remainder
    // 99 MiB < 128 MiB: the real allocator (H200, JAX 0.11.2) does not split.
    let mut a = Bfc::new(BfcConfig::jax(1 << 30, true));
    let x = a.allocate(1 << 20, End::Lower).unwrap();
    let y = a.allocate((1 << 30) - (100 << 20), End::Lower).unwrap();
    assert_eq!(a.chunk_size(y), (1 << 30) - (1 << 20));
    assert_eq!(a.central_gap_bytes(), 0);
    assert_eq!(a.largest_free_chunk(), 0);
    a.deallocate(y);
    // A remainder of at least 128 MiB is split off and stays the gap.
    let z = a.allocate((1 << 30) - (200 << 20), End::Lower).unwrap();
    assert_eq!(a.chunk_size(z), (1 << 30) - (200 << 20));
    assert_eq!(a.central_gap_bytes(), (200 << 20) - (1 << 20));
    a.deallocate(z);
    a.deallocate(x);
    a.check().unwrap();
}

#[test]
fn upper_end_grows_down() {
    let mut a = Bfc::new(BfcConfig::jax(4096, true));
    let lo = a.allocate(256, End::Lower).unwrap();
    let hi = a.allocate(256, End::Upper).unwrap();
    let blocks = a.chunks_in_order();
    assert_eq!(blocks.first().unwrap().size, 256);
    assert_eq!(blocks.last().unwrap().label, "upper");
    assert_eq!(
        blocks.last().unwrap().addr - blocks.first().unwrap().addr,
        4096 - 256
    );
    a.deallocate(hi);
    a.deallocate(lo);
    assert_eq!(a.central_gap_bytes(), 4096);
    a.check().unwrap();
}

#[test]
fn growth_doubles_regions() {
    let mut a = Bfc::new(BfcConfig::jax(1 << 30, false));
    let x = a.allocate(718546, End::Lower).unwrap();
    assert_eq!(a.stats().pool_bytes, 2 << 20);
    assert_eq!(a.largest_free_chunk(), (2 << 20) - 718592);
    let y = a.allocate(667275086, End::Lower).unwrap();
    // The region doubles from 4 MiB to 1 GiB, capped by what the limit has left.
    assert_eq!(a.stats().pool_bytes, 1 << 30);
    assert_eq!(a.next_region_target(), 1 << 30);
    assert!(a.allocate(1 << 20, End::Lower).is_some());
    assert!(a.allocate(400 << 20, End::Lower).is_none());
    a.deallocate(y);
    a.deallocate(x);
    a.check().unwrap();
}

#[test]
fn growth_backs_off_when_the_device_refuses() {
    let mut cfg = BfcConfig::jax(1 << 30, false);
    cfg.device_free_bytes = Some(3 << 20);
    let mut a = Bfc::new(cfg);
    a.allocate(1 << 20, End::Lower).unwrap(); // 2 MiB region
    a.allocate(1 << 20, End::Lower).unwrap(); // fits in the first region
                                              // Next region wants 4 MiB, the device has 1 MiB left: backs off to >= request.
    let h = a.allocate(900 << 10, End::Lower);
    assert!(h.is_some());
    assert!(a.stats().pool_bytes <= 3 << 20);
    a.check().unwrap();
}
