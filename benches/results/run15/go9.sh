#!/bin/bash
# Session 9 call 9: memory counters of the fine kernel, 1024^3 95%, 64 x 128 tiles: right (HEAD),
# right v8 (A's rows by 16-byte cp.async, untransposed; wrong results), right v5 (no A loads),
# left (HEAD). Which counter tells the right orientation's copy from the left's?
cd "$(dirname "$0")"
for f in spartac*.gz; do gunzip -c $f > ${f%.gz}; chmod +x ${f%.gz}; done
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH
mkdir -p $OUT/r
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sectors_op_read.sum,lts__t_sectors_op_write.sum,lts__t_sector_op_read_hit_rate.pct,lts__t_sectors_srcunit_tex_op_read_lookup_miss.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,l1tex__m_xbar2l1tex_read_sectors.sum,lts__average_gcomp_input_sector_success_rate.pct,sm__cycles_active.avg,smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct,smsp__warp_issue_stalled_barrier_per_warp_active.pct,lts__t_sectors_srcunit_tex.sum,lts__d_sectors_fill_sysmem.sum,lts__t_requests_srcunit_tex_op_read.sum
S="1024x1024x1024 f32 unstructured@0.95 fine"
for x in "right spartac $S tile64s4\$" "v8 spartac_v8 $S tile64s4\$" "v5 spartac_v5 $S tile64s4\$" "left spartac $S tile64s4 left\$" "right99 spartac 4096x4096x4096 f32 unstructured@0.99 fine\$" "left99 spartac 4096x4096x4096 f32 unstructured@0.99 fine left\$"; do
  set -- $x; name=$1; bin=$2; shift 2; filt="$*"
  size=$(echo "$filt" | cut -dx -f1)
  timeout 150 /usr/local/cuda/bin/ncu --clock-control none --metrics $M -k regex:spmm_fine -c 1 ./$bin kernels bench --sizes $size --dtypes f32 --filter "$filt" --reps 1 > $OUT/r/m_$name.txt 2>&1; echo "$name rc=$?"
done
for f in $OUT/r/m_*.txt; do echo "== $f"; grep -E "^ +[a-z_]+__" $f | awk '{printf "%-70s %s %s\n", $1, $2, $3}'; done
cd $OUT && tar czf r.tgz r && rm -rf r
