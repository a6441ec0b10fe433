//! The flash tier's `stats extstore` section: memcached extstore's names where they fit
//! (`extstore_*`), the engine's own `flash_*` pairs, the misses by cause, the knobs. Names
//! and meanings: docs/stats.md.
use crate::flash_tier::tier::FlashTier;
use crate::ledger::Ledger;
use crate::meta::Counters;
use crate::ram::index::Index;

/// `stats extstore`: memcached extstore-like names where they fit, the engine's `flash_*`
/// pairs, the misses by cause (`ledger`), and the RAM the index (`slots`) spends per item.
pub(crate) fn extstore(tier: &FlashTier, slots: &Index, ledger: &Ledger) -> Vec<(String, String)> {
    let t = &tier.counters;
    let engine_stats = tier.flash.stats();
    let g = Counters::get;
    let f = flashtier_flash::FlashStats::get;
    let items = slots.len();
    let index_bytes = slots.memory_bytes();
    // Not the fixed tables over a handful of items: see `Index::bytes_per_entry`.
    let per_item = slots.bytes_per_entry();
    let dead = f(&engine_stats.bytes_dead);
    let live = f(&engine_stats.bytes_used).saturating_sub(dead);
    let ratio = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
    let mut v: Vec<(String, String)> = vec![
        ("extstore_objects_written", g(&t.objects_written)),
        ("extstore_bytes_written", g(&t.bytes_written)),
        ("extstore_objects_read", g(&t.objects_read)),
        ("extstore_bytes_read", g(&t.bytes_read)),
        ("extstore_hits", g(&t.hits)),
        ("extstore_tag_collisions", g(&t.collisions)),
        ("extstore_write_check_reads", g(&t.write_check_reads)),
        ("extstore_objects_promoted", g(&t.promoted)),
        ("extstore_promotions_abandoned", g(&t.promotions_abandoned)),
        ("extstore_promotions_skipped", g(&t.promotions_skipped)),
        ("extstore_objects_demoted", g(&t.demoted)),
        ("extstore_objects_evicted", g(&t.evicted)),
        ("extstore_objects_relocated", g(&t.relocated)),
        ("extstore_objects_recovered", g(&t.recovered)),
        ("extstore_write_skipped", g(&t.write_skipped)),
        ("extstore_errors", g(&t.errors)),
        ("extstore_checksum_failures", g(&t.checksum_failures)),
        ("extstore_tombstones", g(&t.tombstones)),
        ("extstore_marker_failures", g(&t.marker_failures)),
        ("extstore_write_failed_in_ram", g(&t.write_failed_in_ram)),
        ("extstore_write_failed_lost", g(&t.write_failed_lost)),
        ("extstore_markers_rewritten", g(&t.markers_rewritten)),
        ("extstore_journal_errors", g(&t.journal_errors)),
        ("extstore_journal_replayed", g(&t.journal_replayed)),
        ("extstore_journal_cold_starts", g(&t.journal_cold_starts)),
        ("extstore_bytes_used", f(&engine_stats.bytes_used)),
        ("extstore_bytes_fragmented", f(&engine_stats.bytes_dead)),
        (
            "extstore_segments_used",
            f(&engine_stats.segments_total).saturating_sub(f(&engine_stats.segments_free)),
        ),
        ("extstore_segments_free", f(&engine_stats.segments_free)),
        ("extstore_compactions", f(&engine_stats.reclaims)),
        ("extstore_io_queue", f(&engine_stats.io_queue_depth)),
        (
            "extstore_flash_checksum_failures",
            f(&engine_stats.checksum_failures),
        ),
        ("extstore_index_items", items),
        ("extstore_index_bytes", index_bytes),
        ("extstore_index_hash_width", u64::from(slots.hash_bits())),
        ("extstore_written_back", g(&t.written_back)),
        ("extstore_write_back_queue", tier.dirty.len() as u64),
        (
            "extstore_write_back_lag_ms",
            tier.dirty
                .lag_ms(tier.clock.now_ms(), tier.tiering.write_back_ms()),
        ),
        ("extstore_append_waits", g(&tier.gate.waits)),
        ("extstore_append_wait_us", g(&tier.gate.wait_us)),
        ("extstore_append_wait_timeouts", g(&tier.gate.wait_timeouts)),
        ("extstore_evictions_deferred", g(&t.evictions_deferred)),
        ("extstore_evictions_flash_busy", g(&t.evictions_flash_busy)),
        ("extstore_drop_waits", g(&t.drop_waits)),
        ("extstore_drop_wait_us", g(&t.drop_wait_us)),
        ("extstore_drop_wait_timeouts", g(&t.drop_wait_timeouts)),
        ("extstore_reclaim_kept_hit", g(&t.reclaim_kept_hit)),
        ("extstore_reclaim_kept_unhit", g(&t.reclaim_kept_unhit)),
        ("extstore_reclaim_kept_small", g(&t.reclaim_kept_small)),
        (
            "extstore_reclaim_dropped_young",
            g(&t.reclaim_dropped_young),
        ),
        ("extstore_reclaim_dropped_old", g(&t.reclaim_dropped_old)),
        (
            "extstore_reclaim_dropped_in_ram",
            g(&t.reclaim_dropped_in_ram),
        ),
        ("extstore_live_bytes", live),
        ("extstore_dead_bytes", dead),
        (
            "extstore_compaction_bytes_read",
            f(&engine_stats.reclaim_bytes_read),
        ),
        (
            "extstore_compaction_bytes_written",
            f(&engine_stats.bytes_rewritten),
        ),
    ]
    .into_iter()
    .chain(tier.payback.pairs())
    .chain(ledger.counts())
    .map(|(k, n)| (k.to_string(), n.to_string()))
    .collect();
    v.push(("ram_bytes_per_flash_item".into(), format!("{per_item:.2}")));
    let live_pct = 100.0 * ratio(live, tier.info.capacity);
    v.push(("extstore_live_percent".into(), format!("{live_pct:.2}")));
    let wa = ratio(f(&engine_stats.device_bytes_written), g(&t.bytes_stored));
    v.push((
        "extstore_device_bytes_per_byte_stored".into(),
        format!("{wa:.3}"),
    ));
    v.push(("extstore_backend".into(), tier.info.backend.to_string()));
    v.push(("extstore_capacity".into(), tier.info.capacity.to_string()));
    v.push((
        "extstore_limit_maxbytes".into(),
        tier.info.capacity.to_string(),
    ));
    v.push((
        "extstore_segment_size".into(),
        tier.info.segment_size.to_string(),
    ));
    for (k, n) in engine_stats.pairs() {
        v.push((k.to_string(), n.to_string()));
    }
    for (k, val) in crate::knobs::list(&tier.tiering, &tier.flash) {
        v.push((format!("extstore_knob_{k}"), val));
    }
    v
}
