// Checks a browser test reads from the page's attributes: how many figures rendered (images decoded, SVG charts
// with a size), and which texts of the charts are cut off at their figure's edge (none should be).
window.addEventListener('load',function(){var ok=0,bad=0,imgs=document.images,svgs=document.querySelectorAll('svg.figure');
for(var i=0;i<imgs.length;i++){if(imgs[i].complete&&imgs[i].naturalWidth>0)ok++;else bad++;}
for(var j=0;j<svgs.length;j++){var b=svgs[j].getBBox();if(b.width>0&&b.height>0)ok++;else bad++;}
var cut=[];for(var k=0;k<svgs.length;k++){var box=svgs[k].getBoundingClientRect(),texts=svgs[k].querySelectorAll('text');
for(var t=0;t<texts.length;t++){var r=texts[t].getBoundingClientRect();
if(r.left<box.left-0.5||r.right>box.right+0.5||r.top<box.top-0.5||r.bottom>box.bottom+0.5)cut.push(texts[t].textContent);}}
document.body.setAttribute('data-figures',imgs.length+svgs.length);document.body.setAttribute('data-figures-ok',ok);document.body.setAttribute('data-figures-bad',bad);
document.body.setAttribute('data-texts-cut',cut.length);document.body.setAttribute('data-texts-cut-list',cut.join(' | '));});
