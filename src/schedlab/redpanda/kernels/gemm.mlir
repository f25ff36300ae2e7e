// C += A * B (PolyBench gemm, integer); @N@ is substituted by schedlab.redpanda.workloads
func.func @gemm(%A: memref<@N@x@N@xi32>, %B: memref<@N@x@N@xi32>, %C: memref<@N@x@N@xi32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = arith.constant @N@ : index
  scf.for %i = %c0 to %n step %c1 {
    scf.for %j = %c0 to %n step %c1 {
      %c = memref.load %C[%i, %j] : memref<@N@x@N@xi32>
      %s = scf.for %k = %c0 to %n step %c1 iter_args(%acc = %c) -> (i32) {
        %a = memref.load %A[%i, %k] : memref<@N@x@N@xi32>
        %b = memref.load %B[%k, %j] : memref<@N@x@N@xi32>
        %p = arith.muli %a, %b : i32
        %t = arith.addi %acc, %p : i32
        scf.yield %t : i32
      }
      memref.store %s, %C[%i, %j] : memref<@N@x@N@xi32>
    }
  }
  func.return
}
