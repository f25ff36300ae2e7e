// y = alpha A x + beta B x (PolyBench gesummv, integer)
func.func @gesummv(%A: memref<@N@x@N@xi32>, %B: memref<@N@x@N@xi32>, %x: memref<@N@xi32>, %y: memref<@N@xi32>, %alpha: i32, %beta: i32) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = arith.constant @N@ : index
  %z = arith.constant 0 : i32
  scf.for %i = %c0 to %n step %c1 {
    %t:2 = scf.for %j = %c0 to %n step %c1 iter_args(%ta = %z, %tb = %z) -> (i32, i32) {
      %a = memref.load %A[%i, %j] : memref<@N@x@N@xi32>
      %b = memref.load %B[%i, %j] : memref<@N@x@N@xi32>
      %xj = memref.load %x[%j] : memref<@N@xi32>
      %pa = arith.muli %a, %xj : i32
      %pb = arith.muli %b, %xj : i32
      %na = arith.addi %ta, %pa : i32
      %nb = arith.addi %tb, %pb : i32
      scf.yield %na, %nb : i32, i32
    }
    %sa = arith.muli %alpha, %t#0 : i32
    %sb = arith.muli %beta, %t#1 : i32
    %yi = arith.addi %sa, %sb : i32
    memref.store %yi, %y[%i] : memref<@N@xi32>
  }
  func.return
}
