// 4-tap FIR filter: y[i] = sum_k h[k] x[i+k]
func.func @fir(%x: memref<@N4@xi32>, %h: memref<4xi32>, %y: memref<@N@xi32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %n = arith.constant @N@ : index
  %z = arith.constant 0 : i32
  scf.for %i = %c0 to %n step %c1 {
    %s = scf.for %k = %c0 to %c4 step %c1 iter_args(%acc = %z) -> (i32) {
      %ik = arith.addi %i, %k : index
      %xv = memref.load %x[%ik] : memref<@N4@xi32>
      %hv = memref.load %h[%k] : memref<4xi32>
      %p = arith.muli %xv, %hv : i32
      %t = arith.addi %acc, %p : i32
      scf.yield %t : i32
    }
    memref.store %s, %y[%i] : memref<@N@xi32>
  }
  func.return
}
