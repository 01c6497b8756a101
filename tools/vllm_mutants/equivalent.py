"""Survivors that no input can tell apart from the original, each with the reason a reviewer checks.

``{mutant id: one-line reason}``; ids as :mod:`tools.vllm_mutants.generate`
makes them (the same in both scopes).  Applied after a run; an entry that
matches no generated mutant is an error (exit 2), so the table cannot outlive
a change of the file.
"""

from __future__ import annotations

from tools.vllm_mutants.discover import MutantError

EQUIVALENT: dict[str, str] = {
    "rocm_aiter_mla_sparse:_convert_req_index_to_global_index_kernel:L190:swap_statements:1": "two tl.program_id reads; neither reads what the other binds",
    "rocm_aiter_mla_sparse:_convert_req_index_to_global_index_kernel:L200:swap_statements:1": "two tl.load reads of cu_seqlens; neither reads what the other binds",
    "rocm_aiter_mla_sparse:triton_convert_req_index_to_global_index:L253:swap_statements:1": "two message-less dtype asserts: same AssertionError whichever fails first, no other effect",
    "rocm_aiter_mla_sparse:triton_convert_req_index_to_global_index:L256:swap_statements:1": "a message-less assert on two ints moved past num_tokens = req_id.shape[0], which it does not read",
    "rocm_aiter_mla_sparse:triton_convert_req_index_to_global_index:L266:swap_statements:1": ".contiguous() of two different tensors; neither reads what the other binds",
    "rocm_aiter_mla_sparse:ROCMAiterMLASparseMetadataBuilder.__init__:L486:swap_statements:1": "two independent allocations (torch.empty / torch.zeros) into different attributes",
    "rocm_aiter_mla_sparse:ROCMAiterMLASparseMetadataBuilder.__init__:L498:swap_statements:1": "two independent allocations (torch.ones / torch.zeros) into different attributes",
    "rocm_aiter_mla_sparse:ROCMAiterMLASparseMetadataBuilder.__init__:L525:swap_statements:1": "_decode_req_id_extent = 0 moved past `from aiter import ...`, which does not read it",
    "rocm_aiter_mla_sparse:ROCMAiterMLASparseMetadataBuilder.__init__:L525:const_0_1:1": "extent 1 claims req_id_per_token[0] == 0 before any build: true, the buffer is torch.zeros",
    "rocm_aiter_mla_sparse:ROCMAiterMLASparseMetadataBuilder.__init__:L574:swap_statements:1": "two independent torch.empty allocations into different attributes",
    "rocm_aiter_mla_sparse:ROCMAiterMLASparseMetadataBuilder.__init__:L590:const_0_1:1": "a first build with 0 tokens then zeroes paged_kv_indices[0:1], still torch.zeros; later builds reset the extent",
    "rocm_aiter_mla_sparse:ROCMAiterMLASparseMetadataBuilder.build:L614:swap_statements:1": "num_tokens = common_attn_metadata.num_actual_tokens and the split call; neither reads what the other binds",
    "rocm_aiter_mla_sparse:ROCMAiterMLASparseMetadataBuilder.build:L615:swap_statements:1": "the split call and starts = np.asarray(query_start_loc_cpu); neither reads what the other binds",
    "rocm_aiter_mla_sparse:ROCMAiterMLASparseMetadataBuilder.build:L617:drop_clause:2": "`or 1` is never reached: __init__ calls _init_reorder_batch_threshold(1, ...), which leaves reorder_batch_threshold an int >= 1",
    "rocm_aiter_mla_sparse:ROCMAiterMLASparseMetadataBuilder.build:L617:const_0_1:1": "`or 0` is never reached: __init__ calls _init_reorder_batch_threshold(1, ...), which leaves reorder_batch_threshold an int >= 1",
    "rocm_aiter_mla_sparse:ROCMAiterMLASparseMetadataBuilder.build:L620:swap_statements:1": "np.diff(starts) and an attribute read; neither reads what the other binds",
    "rocm_aiter_mla_sparse:ROCMAiterMLASparseMetadataBuilder.build:L634:swap_statements:1": "new_indices_extent = num_tokens * topk moved past the req-extent block, which neither reads nor changes its inputs",
    "rocm_aiter_mla_sparse:ROCMAiterMLASparseMetadataBuilder.build:L640:flip_compare:1": "with equal extents the fill_ covers an empty slice [x:x]: a no-op",
    "rocm_aiter_mla_sparse:ROCMAiterMLASparseMetadataBuilder.build:L649:swap_statements:1": "an assert that always holds when pure_decode (it implies the event and the upper bound exist) moved before a block it does not read",
    "rocm_aiter_mla_sparse:ROCMAiterMLASparseMetadataBuilder.build:L663:const_0_1:1": "host_indptr[n:] = host_indptr[n] also writes element n with its own value",
    "rocm_aiter_mla_sparse:ROCMAiterMLASparseMetadataBuilder.build:L667:const_0_1:1": "after a device step req_id_per_token[0] is 0 (token 0 belongs to request 0: every real request has query_len >= 1, pads come last), so extent 1 only skips rewriting 0 over 0",
    "rocm_aiter_mla_sparse:ROCMAiterMLASparseImpl.__init__:L884:swap_statements:1": "init_topk_indices_buffer(...) and get_current_vllm_config(); neither reads what the other sets",
    "rocm_aiter_mla_sparse:ROCMAiterMLASparseImpl.forward_mqa:L1222:swap_statements:1": "num_actual_toks = attn_metadata.num_actual_tokens moved before the query assembly, which does not read or change it",
    "rocm_aiter_mla_sparse:_convert_req_index_to_global_index_kernel:L194:swap_statements:1": "an index from tl.program_id/tl.arange and a tl.load of req_id; neither reads what the other binds",
    "rocm_aiter_mla_sparse:_convert_req_index_to_global_index_kernel:L197:swap_statements:1": "two tl.load reads (req_id, cu_seqlens); neither reads what the other binds",
    "rocm_aiter_mla_sparse:_convert_req_index_to_global_index_kernel:L203:swap_statements:1": "the top-k address computed before the early return instead of after it: a pure address the return does not use",
    "rocm_aiter_mla_sparse:_convert_req_index_to_global_index_kernel:L211:force_condition:2": "a negative (-1) token gives block_id < 0, which ~valid_block already maps to 0",
    "rocm_aiter_mla_sparse:_convert_req_index_to_global_index_kernel:L218:flip_compare:1": "differs only for a top-k index whose block is past the request's block table; the indexer's indices are token positions below the request's seq_len, inside its blocks",
    "rocm_aiter_mla_sparse:_convert_req_index_to_global_index_kernel:L220:const_0_1:1": "the masked load's fill value is read only where valid_block is false, and there tl.where writes 0 instead",
    "rocm_aiter_mla_sparse:_convert_req_index_to_global_index_kernel:L223:swap_statements:1": "the output address computed one statement earlier; the value computation does not read it",
    "rocm_aiter_mla_sparse:_convert_req_index_to_global_index_kernel:L224:const_0_1:1": "differs only for an invalid or out-of-table top-k entry inside a token's live range; the live range holds min(seq_len, topk) entries, all valid indices",
    "rocm_aiter_mla_sparse:triton_convert_req_index_to_global_index:L252:swap_statements:1": "two message-less dtype asserts: same AssertionError whichever fails first, no other effect",
    "rocm_aiter_mla_sparse:triton_convert_req_index_to_global_index:L254:swap_statements:1": "two asserts on shapes and ints reordered: an AssertionError either way, no other effect",
    "rocm_aiter_mla_sparse:triton_convert_req_index_to_global_index:L255:swap_statements:1": "two asserts on shapes and ints reordered: an AssertionError either way, no other effect",
    "rocm_aiter_mla_sparse:triton_convert_req_index_to_global_index:L260:shift_index:2": "req_id is 1-D: shape[0] is shape[-1]",
    "rocm_aiter_mla_sparse:triton_convert_req_index_to_global_index:L262:swap_statements:1": "an int division and req_id.contiguous(); neither reads what the other binds",
    "rocm_aiter_mla_sparse:triton_convert_req_index_to_global_index:L265:swap_statements:1": ".contiguous() of two different tensors; neither reads what the other binds",
    "rocm_aiter_mla_sparse:triton_convert_req_index_to_global_index:L267:swap_statements:1": "token_indices.contiguous() and block_table_c.stride(); neither reads what the other binds",
    "rocm_aiter_mla_sparse:triton_convert_req_index_to_global_index:L270:swap_statements:1": "two .stride() reads of different tensors; neither reads what the other binds",
    "rocm_aiter_mla_sparse:triton_convert_req_index_to_global_index:L271:swap_statements:1": "a .stride() read and the grid tuple; neither reads what the other binds",
    "rocm_aiter_mla_sparse:ROCMAiterMLASparseImpl.forward_mqa:L1222:force_condition:1": "the impl sets supports_dcp = False and leaves supports_quant_query_input False, so MLAAttention hands forward_mqa a (ql_nope, q_pe) tuple",
    "rocm_aiter_mla_sparse:ROCMAiterMLASparseImpl.forward_mqa:L1236:force_condition:1": "torch.cat and ops.concat_mla_q write the same concatenation into q; forcing torch.cat changes the kernel, not a value",
    "rocm_aiter_mla_sparse:ROCMAiterMLASparseImpl.forward_mqa:L1241:swap_statements:1": "an attribute read and an assert on another attribute; neither reads what the other binds",
    "rocm_aiter_mla_sparse:ROCMAiterMLASparseImpl.forward_mqa:L1244:swap_statements:1": "the assert that topk_indices_buffer exists moved past its first use: set in __init__, never None here",
    "rocm_aiter_mla_sparse:ROCMAiterMLASparseImpl.forward_mqa:L1246:shift_index:1": "one more row of the top-k buffer in the view: the remap's grid is req_id's length and it returns before reading a row whose live range is empty",
    "rocm_aiter_mla_sparse:ROCMAiterMLASparseImpl.forward_mqa:L1249:swap_statements:1": "the remap (top-k buffer, metadata) and the fp8 block (the cache's view, q): neither reads what the other writes",
    "rocm_aiter_mla_sparse:ROCMAiterMLASparseImpl.forward_mqa:L1261:swap_statements:1": "the cache's fp8 view and the query's quantisation; neither reads what the other binds",
    "rocm_aiter_mla_sparse:ROCMAiterMLASparseImpl.forward_mqa:L1262:force_condition:2": "the impl sets supports_dcp = False and leaves supports_quant_query_input False, so MLAAttention hands forward_mqa a (ql_nope, q_pe) tuple; with an fp8 cache the concat-and-quantise branch already made q fp8, so `q.dtype != fp8` is never true and this block never runs",
    "rocm_aiter_mla_sparse:ROCMAiterMLASparseImpl.forward_mqa:L1263:swap_statements:1": "the impl sets supports_dcp = False and leaves supports_quant_query_input False, so MLAAttention hands forward_mqa a (ql_nope, q_pe) tuple; with an fp8 cache the concat-and-quantise branch already made q fp8, so `q.dtype != fp8` is never true and this block never runs",
    "rocm_aiter_mla_sparse:ROCMAiterMLASparseImpl.forward_mqa:L1264:swap_statements:1": "the impl sets supports_dcp = False and leaves supports_quant_query_input False, so MLAAttention hands forward_mqa a (ql_nope, q_pe) tuple; with an fp8 cache the concat-and-quantise branch already made q fp8, so `q.dtype != fp8` is never true and this block never runs",
    "rocm_aiter_mla_sparse:ROCMAiterMLASparseImpl.forward_mqa:L1264:shift_index:1": "the impl sets supports_dcp = False and leaves supports_quant_query_input False, so MLAAttention hands forward_mqa a (ql_nope, q_pe) tuple; with an fp8 cache the concat-and-quantise branch already made q fp8, so `q.dtype != fp8` is never true and this block never runs",
    "rocm_aiter_mla_sparse:ROCMAiterMLASparseImpl.forward_mqa:L1264:shift_index:2": "the impl sets supports_dcp = False and leaves supports_quant_query_input False, so MLAAttention hands forward_mqa a (ql_nope, q_pe) tuple; with an fp8 cache the concat-and-quantise branch already made q fp8, so `q.dtype != fp8` is never true and this block never runs",
    "rocm_aiter_mla_sparse:ROCMAiterMLASparseImpl.forward_mqa:L1264:const_0_1:2": "the impl sets supports_dcp = False and leaves supports_quant_query_input False, so MLAAttention hands forward_mqa a (ql_nope, q_pe) tuple; with an fp8 cache the concat-and-quantise branch already made q fp8, so `q.dtype != fp8` is never true and this block never runs",
    "rocm_aiter_mla_sparse:ROCMAiterMLASparseImpl.forward_mqa:L1266:swap_statements:1": "get_mla_padded_q computed before the AITER branch returns: a pure function of q that branch does not use",
    "rocm_aiter_mla_sparse:ROCMAiterMLASparseMetadataBuilder.build:L640:swap_statements:1": "the indices' shrink-tail check and self._prev_req_extent = new_req_extent; neither reads what the other binds",
    "rocm_aiter_mla_sparse:ROCMAiterMLASparseMetadataBuilder.build:L640:force_condition:1": "when the batch did not shrink the fill's slice is empty",
    "rocm_aiter_mla_sparse:ROCMAiterMLASparseMetadataBuilder.build:L640:force_condition:2": "only paged_kv_indices past the new extent changes, and nothing reads it: the attention reads the ranges paged_kv_indptr defines, and forward_mqa's remap rewrites that live range after build() (the file's own comment)",
    "rocm_aiter_mla_sparse:ROCMAiterMLASparseMetadataBuilder.build:L641:delete_call:1": "only paged_kv_indices past the new extent changes, and nothing reads it: the attention reads the ranges paged_kv_indptr defines, and forward_mqa's remap rewrites that live range after build() (the file's own comment)",
    "rocm_aiter_mla_sparse:ROCMAiterMLASparseMetadataBuilder.build:L641:shift_index:1": "only paged_kv_indices past the new extent changes, and nothing reads it: the attention reads the ranges paged_kv_indptr defines, and forward_mqa's remap rewrites that live range after build() (the file's own comment)",
    "rocm_aiter_mla_sparse:ROCMAiterMLASparseMetadataBuilder.build:L641:shift_index:2": "zeroes paged_kv_indices[n * topk - 1] as well, inside the range forward_mqa's remap rewrites before anything reads it",
    "rocm_aiter_mla_sparse:ROCMAiterMLASparseMetadataBuilder.build:L641:shift_index:3": "only paged_kv_indices past the new extent changes, and nothing reads it: the attention reads the ranges paged_kv_indptr defines, and forward_mqa's remap rewrites that live range after build() (the file's own comment); the slice stops at the buffer's end",
    "rocm_aiter_mla_sparse:ROCMAiterMLASparseMetadataBuilder.build:L641:shift_index:4": "only paged_kv_indices past the new extent changes, and nothing reads it: the attention reads the ranges paged_kv_indptr defines, and forward_mqa's remap rewrites that live range after build() (the file's own comment)",
    "rocm_aiter_mla_sparse:ROCMAiterMLASparseMetadataBuilder.build:L642:const_0_1:1": "only paged_kv_indices past the new extent changes, and nothing reads it: the attention reads the ranges paged_kv_indptr defines, and forward_mqa's remap rewrites that live range after build() (the file's own comment)",
    "rocm_aiter_mla_sparse:ROCMAiterMLASparseMetadataBuilder.build:L645:swap_statements:1": "self._prev_indices_extent stored after the path's work instead of before; that work does not read it",
    # ----- the change's own lines (--base ../shared/vllm-pr-base), beyond those above
    "rocm_aiter_mla_sparse:ROCMAiterMLASparseMetadataBuilder.__init__:L509:swap_statements:1": "the paged_kv_indptr allocation and pin = is_pin_memory_available(); neither reads what the other binds",
    "rocm_aiter_mla_sparse:ROCMAiterMLASparseMetadataBuilder.__init__:L517:swap_statements:1": "_host_decode_indptr (a bool of the config and pin) and the _host_indptr allocation; neither reads what the other binds",
    "rocm_aiter_mla_sparse:ROCMAiterMLASparseMetadataBuilder.__init__:L518:swap_statements:1": "the _host_indptr allocation and the upload event's creation; neither reads what the other binds",
    "rocm_aiter_mla_sparse:ROCMAiterMLASparseMetadataBuilder.__init__:L523:swap_statements:1": "the upload event's creation and _decode_req_id_extent = 0; neither reads what the other binds",
    "rocm_aiter_mla_sparse:ROCMAiterMLASparseMetadataBuilder.__init__:L523:force_condition:1": "an event is made without pinned memory too; build() uses it only on the host path, which needs _host_decode_indptr, false without pinned memory",
    "rocm_aiter_mla_sparse:ROCMAiterMLASparseMetadataBuilder.build:L622:swap_statements:1": "pure_decode and new_req_extent = num_tokens; neither reads what the other binds",
    "rocm_aiter_mla_sparse:ROCMAiterMLASparseMetadataBuilder.build:L623:drop_clause:3": "num_prefills == 0 follows from max_query_len == 1: split_decodes_and_prefills counts every request as a decode when max_query_len <= the threshold, an int >= 1",
    "rocm_aiter_mla_sparse:ROCMAiterMLASparseMetadataBuilder.build:L623:drop_clause:4": "num_decode_tokens == num_tokens follows from max_query_len == 1: when every request is a decode, split_decodes_and_prefills returns num_actual_tokens (pad tokens included) as the decode tokens",
    "rocm_aiter_mla_sparse:ROCMAiterMLASparseMetadataBuilder.build:L635:flip_compare:1": "with equal extents the fill_ covers the empty slice [n:n], and min(extent, n) keeps the extent, which is never above the previous step's n",
    "rocm_aiter_mla_sparse:ROCMAiterMLASparseMetadataBuilder.build:L635:force_condition:1": "when the batch did not shrink the fill_ covers an empty slice and min(extent, n) keeps the extent, which is never above the previous step's n <= n",
    "rocm_aiter_mla_sparse:ROCMAiterMLASparseMetadataBuilder.build:L636:swap_statements:1": "the shrink tail's zero fill and the extent's min(); neither reads what the other writes",
    "rocm_aiter_mla_sparse:ROCMAiterMLASparseMetadataBuilder.build:L650:swap_statements:1": "the req_id copy and the extent's update; neither reads what the other writes",
    "rocm_aiter_mla_sparse:ROCMAiterMLASparseMetadataBuilder.build:L656:swap_statements:1": "an assert that always holds on the host path (pure_decode implies the event and the upper bound exist) and the event's synchronize, in either order",
    "rocm_aiter_mla_sparse:ROCMAiterMLASparseMetadataBuilder.build:L656:drop_clause:1": "a clause of an assert that always holds on the host path: pure_decode implies _host_decode_indptr, so pinned memory, so the event",
    "rocm_aiter_mla_sparse:ROCMAiterMLASparseMetadataBuilder.build:L656:drop_clause:2": "a clause of an assert that always holds on the host path: pure_decode implies seq_lens_upper is not None",
    "rocm_aiter_mla_sparse:ROCMAiterMLASparseMetadataBuilder.build:L657:swap_statements:1": "the numpy view of the pinned buffer taken before the event's synchronize instead of after: a view reads and writes nothing; the writes still come after the wait",
    "rocm_aiter_mla_sparse:ROCMAiterMLASparseMetadataBuilder.build:L660:shift_index:1": "seq_lens_cpu_upper_bound is optimistic_seq_lens_cpu[:num_reqs_padded] (gpu_model_runner), and a pure-decode step has one token per request, so it holds num_tokens entries: [:n + 1] is [:n]",
    "rocm_aiter_mla_sparse:ROCMAiterMLASparseMetadataBuilder.build:L663:shift_index:2": "host_indptr[n:] = host_indptr[n] also writes element n with its own value",
    "rocm_aiter_mla_sparse:ROCMAiterMLASparseMetadataBuilder.build:L667:swap_statements:1": "_decode_req_id_extent = 0 and the host-side np.repeat; neither reads what the other binds",
    "rocm_aiter_mla_sparse:ROCMAiterMLASparseMetadataBuilder.build:L669:shift_index:2": "seg_lengths is 1-D: shape[-1] is shape[0]",
    "rocm_aiter_mla_sparse:ROCMAiterMLASparseMetadataBuilder.build:L671:swap_statements:1": "the req_id upload and query_lens = query_start_loc[1:] - query_start_loc[:-1]; neither reads what the other writes",
    "rocm_aiter_mla_sparse:ROCMAiterMLASparseMetadataBuilder.build:L687:shift_index:3": "torch resizes a cumsum out= view of the wrong length to the input's n entries (a deprecation warning, torch 2.13) and writes the same paged_kv_indptr[1:n + 1]",
    "rocm_aiter_mla_sparse:ROCMAiterMLASparseMetadataBuilder.build:L687:shift_index:4": "torch resizes a cumsum out= view of the wrong length to the input's n entries (a deprecation warning, torch 2.13) and writes the same paged_kv_indptr[1:n + 1]",
    "rocm_aiter_mla_sparse:ROCMAiterMLASparseMetadataBuilder.build:L687:const_0_1:3": "torch resizes a cumsum out= view of the wrong length to the input's n entries (a deprecation warning, torch 2.13) and writes the same paged_kv_indptr[1:n + 1]",
    "rocm_aiter_mla_sparse:ROCMAiterMLASparseMetadataBuilder.build:L689:shift_index:2": "paged_kv_indptr[n:].fill_(paged_kv_indptr[n]) also writes element n with its own value",
    "rocm_aiter_mla_sparse:ROCMAiterMLASparseMetadataBuilder.build:L689:const_0_1:1": "paged_kv_indptr[n + 0:].fill_(paged_kv_indptr[n]) also writes element n with its own value",
}


def check_equivalent_table(table: dict, ids) -> None:
    ids = set(ids)
    unknown = sorted(k for k in table if k not in ids)
    if unknown:
        raise MutantError(
            f"EQUIVALENT names mutants that are not generated: {unknown}; the overlay's code changed since "
            "they were classified: classify its survivors again"
        )
    blank = sorted(k for k, reason in table.items() if not str(reason).strip())
    if blank:
        raise MutantError(f"EQUIVALENT entries without a reason: {blank}")
