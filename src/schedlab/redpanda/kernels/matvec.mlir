// y = A x
func.func @matvec(%A: memref<@N@x@N@xi32>, %x: memref<@N@xi32>, %y: memref<@N@xi32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = arith.constant @N@ : index
  %z = arith.constant 0 : i32
  scf.for %i = %c0 to %n step %c1 {
    %s = scf.for %j = %c0 to %n step %c1 iter_args(%acc = %z) -> (i32) {
      %a = memref.load %A[%i, %j] : memref<@N@x@N@xi32>
      %v = memref.load %x[%j] : memref<@N@xi32>
      %p = arith.muli %a, %v : i32
      %t = arith.addi %acc, %p : i32
      scf.yield %t : i32
    }
    memref.store %s, %y[%i] : memref<@N@xi32>
  }
  func.return
}
