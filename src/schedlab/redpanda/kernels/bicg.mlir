// s = r^T A, q = A p (PolyBench bicg, integer)
func.func @bicg(%A: memref<@N@x@N@xi32>, %r: memref<@N@xi32>, %p: memref<@N@xi32>, %s: memref<@N@xi32>, %q: memref<@N@xi32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = arith.constant @N@ : index
  %z = arith.constant 0 : i32
  scf.for %i = %c0 to %n step %c1 {
    %ri = memref.load %r[%i] : memref<@N@xi32>
    %qi = scf.for %j = %c0 to %n step %c1 iter_args(%acc = %z) -> (i32) {
      %a = memref.load %A[%i, %j] : memref<@N@x@N@xi32>
      %sj = memref.load %s[%j] : memref<@N@xi32>
      %rs = arith.muli %ri, %a : i32
      %ns = arith.addi %sj, %rs : i32
      memref.store %ns, %s[%j] : memref<@N@xi32>
      %pj = memref.load %p[%j] : memref<@N@xi32>
      %ap = arith.muli %a, %pj : i32
      %t = arith.addi %acc, %ap : i32
      scf.yield %t : i32
    }
    memref.store %qi, %q[%i] : memref<@N@xi32>
  }
  func.return
}
