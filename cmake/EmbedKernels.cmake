# vision_embed_kernels(target dir): embeds every .cuh under dir into the target as text (filled in by the kernel system).
function(vision_embed_kernels target dir)
endfunction()
